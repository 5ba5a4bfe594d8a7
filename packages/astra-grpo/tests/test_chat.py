"""Rendering conversations to tokens exactly as they are served, assistant masks, and reply parsing,
for the Hermes format (SmolLM2's plain ChatML, as astra-core serves it) and a tool-aware template."""

import json

import pytest
from astra_core.local.model_chat import UnreadableTemplate
from astra_grpo.chat import ChatRenderer, TemplateError
from grpo_support import QWEN_STYLE_TEMPLATE, load_tokenizer, rl_sample

CALL = '<tool_call>\n{"name": "get_capital", "arguments": {"country": "Norway"}}\n</tool_call>'


def conversation():
    sample = rl_sample()
    return sample["tools"], sample["messages"] + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_capital",
                                                              "arguments": '{"country": "Norway"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"capital": "Oslo"}'},
        {"role": "assistant", "content": "The capital of Norway is Oslo."},
    ]


@pytest.fixture(scope="module", params=["hermes", "template"])
def renderer(request):
    if request.param == "hermes":
        return ChatRenderer(load_tokenizer(), "auto")
    return ChatRenderer(load_tokenizer(QWEN_STYLE_TEMPLATE), "auto")


def test_auto_style_follows_the_template():
    assert ChatRenderer(load_tokenizer()).style == "hermes"  # SmolLM2's ChatML knows no tools
    qwen = ChatRenderer(load_tokenizer(QWEN_STYLE_TEMPLATE))
    assert qwen.style == "template" and qwen.reader == "qwen3"  # its <tool_call> JSON, read by that response template


def test_assistant_mask_covers_assistant_turns_and_their_end_token_only(renderer):
    tools, messages = conversation()
    ids, mask = renderer.encode(messages, tools)
    trained = renderer.tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained.count("<|im_end|>") == 2
    assert "The capital of Norway is Oslo.<|im_end|>" in trained
    assert '"get_capital"' in trained and "Norway" in trained
    assert "Oslo\"}" not in trained.split("<|im_end|>")[0]  # the observation is not trained on
    assert "population of the capital" not in trained  # nor the user's question


def test_turn_by_turn_tokens_equal_the_whole_rendering(renderer):
    """prompt + generated + observation + generated (+ closing) == tokenize(render(conversation))."""
    tools, messages = conversation()
    tokenizer = renderer.tokenizer
    stop = renderer.stop_ids[0]
    tokens = renderer.prompt_ids(messages[:2], tools)
    first_turn = renderer.render(messages[:3], tools)[len(renderer.render(messages[:2], tools, True)):]
    first_turn = first_turn[:first_turn.rindex("<|im_end|>")]
    tokens += tokenizer(first_turn, add_special_tokens=False)["input_ids"] + [stop]
    tokens += renderer.observation_ids(messages[2], messages[3:4], tools, stop)
    tokens += tokenizer("The capital of Norway is Oslo.", add_special_tokens=False)["input_ids"] + [stop]
    tokens += renderer.closing_ids(messages[4], tools, stop)[0]
    assert tokens == renderer.encode_text(renderer.render(messages, tools))


def test_observation_after_a_cut_turn_closes_it_first():
    renderer = ChatRenderer(load_tokenizer())
    tools, messages = conversation()
    stop = renderer.stop_ids[0]
    after_stop = renderer.tokenizer.decode(renderer.observation_ids(messages[2], messages[3:4], tools, stop))
    after_cut = renderer.tokenizer.decode(renderer.observation_ids(messages[2], messages[3:4], tools, None))
    assert after_cut == "<|im_end|>" + after_stop
    assert "<tool_response>\n{\"capital\": \"Oslo\"}\n</tool_response>" in after_stop
    assert after_stop.endswith("<|im_start|>assistant\n")


def test_parse_keeps_prose_and_unreadable_blocks_and_reads_calls():
    renderer = ChatRenderer(load_tokenizer())
    reply = renderer.parse(f"Let me look.\n{CALL}\n<tool_call>{{'name': broken}}</tool_call>")
    assert [(c.name, c.arguments) for c in reply.calls] == [("get_capital", {"country": "Norway"})]
    assert len(reply.malformed) == 1 and "not valid JSON" in reply.malformed[0]
    assert reply.content.startswith("Let me look.") and "broken" in reply.content and "get_capital" not in reply.content
    unclosed = renderer.parse('<tool_call>\n{"name": "get_population", "arguments": {"city": "Oslo"}}')
    assert [c.name for c in unclosed.calls] == ["get_population"]
    assert renderer.parse("Oslo.").calls == [] and renderer.parse("Oslo.").malformed == []



def test_a_close_tag_inside_an_argument_string_does_not_cut_the_call():
    # e.g. a model writing the chat format's own markup into a file: the JSON object, not the first tag, ends it
    text = ('<tool_call>\n{"name": "write_file", "arguments": {"text": "</tool_call> and <tool_call>"}}\n</tool_call>'
            '\nDone.')
    reply = ChatRenderer(load_tokenizer()).parse(text)
    assert [(c.name, c.arguments) for c in reply.calls] == [("write_file", {"text": "</tool_call> and <tool_call>"})]
    assert reply.malformed == [] and reply.content == "Done."

def test_a_template_whose_calls_no_known_format_reads_is_refused_at_start_naming_the_fix(tmp_path):
    """A template that renders calls as <call>{...}</call>: read as anything else, every episode would score 0."""
    tokenizer = load_tokenizer(QWEN_STYLE_TEMPLATE.replace("<tool_call>", "<call>").replace("</tool_call>", "</call>"))
    with pytest.raises(UnreadableTemplate, match="--response-template FILE") as refused:
        ChatRenderer(tokenizer)
    assert "\n" not in str(refused.value)  # one line
    spec = tmp_path / "calls.json"
    spec.write_text(json.dumps({"start_anchor": "<|im_start|>assistant\n", "fields": {
        "tool_calls": {"open": "<call>", "close_pattern": r"</call>\s*", "content": "json", "repeats": True,
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"<\|im_end\|>", "content": "text"}}}))
    renderer = ChatRenderer(tokenizer, response_template=str(spec))
    reply = renderer.parse('<call>\n{"name": "get_capital", "arguments": {"country": "France"}}\n</call>',
                           prompt_ids=renderer.prompt_ids([{"role": "user", "content": "q"}], None))
    assert [(c.name, c.arguments) for c in reply.calls] == [("get_capital", {"country": "France"})]
    assert renderer.reader == str(spec)


def test_a_given_response_template_that_misreads_the_template_is_refused():
    with pytest.raises(UnreadableTemplate, match="glm4_moe: read "):
        ChatRenderer(load_tokenizer(QWEN_STYLE_TEMPLATE), response_template="glm4_moe")


def test_a_template_that_rewrites_earlier_turns_is_refused():
    tokenizer = load_tokenizer("{{ messages | length }}{% for m in messages %}<|im_start|>{{ m.role }}\n"
                               "{{ m.content }}<|im_end|>\n{% endfor %}"
                               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    renderer = ChatRenderer(tokenizer, "hermes")
    tools, messages = conversation()
    with pytest.raises(TemplateError):
        renderer.encode(messages, tools)


@pytest.mark.parametrize("template", ["phi3.jinja", "deepseek_r1_distill.jinja", "lfm2.jinja", "deepseekv3.jinja"])
def test_a_call_without_text_renders_through_templates_that_need_the_content_key(template):
    """Real templates (TRL's wheel) that read every message's content: a tool-call turn whose content is null is
    rendered with "" (no text), never without the key (these fail then) nor as the text "None". DeepSeek-V3 renders
    calls itself (its arguments as text); the others know no tools and get Hermes blocks."""
    from template_families import template_text

    tools, messages = conversation()
    renderer = ChatRenderer(load_tokenizer(template_text(template)))
    assert renderer.style == ("template" if template == "deepseekv3.jinja" else "hermes")
    text = renderer.render(messages, tools)
    assert "The capital of Norway is Oslo." in text and "None" not in text and "get_capital" in text


def test_template_style_on_a_template_that_renders_no_calls_is_refused():
    from template_families import template_text

    with pytest.raises(UnreadableTemplate, match="renders no tool calls.*--chat-format hermes"):
        ChatRenderer(load_tokenizer(template_text("phi3.jinja")), "template")
