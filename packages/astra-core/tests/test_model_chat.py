"""A model's own chat conventions read off its tokenizer (astra_core.local.model_chat), and `astra-core serve`
serving a checkpoint its own way: real chat templates (the `trl` wheel's) on tiny tokenizers holding their
special tokens (tests/tiny_tokenizers.py). Model replies here are RECORDED (what each family's template writes for
the turn): they test reading and control flow; the astra-grpo template matrix plays whole episodes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from astra_core.chat_format import ParsedCall
from astra_core.local.generation import Completion
from astra_core.local.model_chat import ModelChat, TemplateError, UnreadableTemplate
from astra_core.local.server import ChatService
from astra_core.reply_formats import REPLY_FORMATS
from tiny_tokenizers import template_text, tiny_tokenizer

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                    "metric": {"type": "boolean"}},
                   "required": ["city", "days"]}}}
QUESTION = [{"role": "user", "content": "Weather in Oslo for 3 days?"}]
CALL = {"role": "assistant", "content": None, "reasoning_content": "The user wants a forecast.",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "get_weather",
                                     "arguments": json.dumps({"city": "Oslo", "days": 3, "metric": True})}}]}


def chat_for(template: str, **kwargs) -> ModelChat:
    return ModelChat(tiny_tokenizer(template_text(f"{template}.jinja")), **kwargs)


@pytest.mark.parametrize(("template", "reader", "stops"), [
    ("glm4moe", "glm4_moe", {"<|observation|>", "<|user|>"}),
    ("gptoss", "gpt_oss", {"<|call|>", "<|return|>"}),
    ("qwen3_5_think", "qwen3_5", {"<|im_end|>"}),
    ("gemma4", "gemma4", {"<turn|>", "<|tool_response>"}),
    ("deepseekv3", "deepseek_v3", {"<｜end▁of▁sentence｜>"}),
])
def test_a_family_is_read_its_own_way_and_its_turns_end_on_its_own_tokens(template, reader, stops):
    chat = chat_for(template)
    assert (chat.style, chat.reader_name) == ("template", reader)
    tokens = {chat.tokenizer.convert_ids_to_tokens(i) for i in chat.stop_ids}
    assert stops | {"<eos>"} == tokens
    text, _ = chat.generated_text(QUESTION, CALL, [WEATHER])  # what a model trained on the template writes
    reading = chat.read(text, chat.render(QUESTION, [WEATHER], True), [WEATHER])
    assert reading.calls == [ParsedCall("get_weather", {"city": "Oslo", "days": 3, "metric": True})]
    assert reading.malformed == []
    if "The user wants a forecast." in text:
        assert reading.reasoning == "The user wants a forecast."


def test_the_generation_configs_eos_ids_end_turns_too():
    chat = chat_for("qwen3_5_think", generation_eos=[7, 9])
    assert {7, 9} <= set(chat.stop_ids)


def test_a_reply_the_format_cannot_read_is_one_malformed_call_with_the_parsers_reason():
    chat = chat_for("gemma4")
    prompt = chat.render(QUESTION, [WEATHER], True)
    reading = chat.read('<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>,days:}<tool_call|>', prompt, [WEATHER])
    assert reading.calls == [] and len(reading.malformed) == 1
    assert reading.malformed[0].startswith("the reply cannot be read as gemma4: ") and "could not parse" in reading.malformed[0]


def test_a_reply_cut_off_inside_a_call_is_a_malformed_call():
    chat = chat_for("qwen3_5_think")
    prompt = chat.render(QUESTION, [WEATHER], True)
    cut = "</think>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOs"
    assert chat.read(cut, prompt, [WEATHER], stopped=True).calls  # the stop token closed it
    reading = chat.read(cut, prompt, [WEATHER], stopped=False)
    assert reading.calls == [] and "cut off inside a tool call" in reading.malformed[0]


def test_a_call_written_without_closing_the_reasoning_the_prompt_opened_is_still_read():
    """Qwen3.5 and Nemotron 3 open `<think>` in the generation prompt; a reply that never closes it is prose and
    calls (TRL's qwen3_5 template reads it all as reasoning, and the call is lost)."""
    chat = chat_for("qwen3_5_think")
    reading = chat.read("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
                        chat.render(QUESTION, [WEATHER], True), [WEATHER])
    assert reading.calls == [ParsedCall("get_weather", {"city": "Oslo", "days": 3})] and reading.reasoning == ""


def test_a_template_whose_calls_no_format_reads_is_refused_in_one_line_naming_the_fix():
    template = template_text("qwen2_5.jinja").replace("<tool_call>", "<call>").replace("</tool_call>", "</call>")
    with pytest.raises(UnreadableTemplate) as refused:
        ModelChat(tiny_tokenizer(template))
    said = str(refused.value)
    assert "\n" not in said and "--response-template FILE" in said and "qwen3_5" in said


def test_the_checkpoints_own_response_template_is_used_and_held_to_what_its_chat_template_writes():
    tokenizer = tiny_tokenizer(template_text("glm4moe.jinja"))
    tokenizer.response_template = REPLY_FORMATS["glm4_moe"].response_template
    assert ModelChat(tokenizer).reader_name == "the checkpoint's response_template"
    tokenizer.response_template = REPLY_FORMATS["qwen3"].response_template  # a wrong one
    with pytest.raises(UnreadableTemplate, match="the checkpoint's response_template: read"):
        ModelChat(tokenizer)
    assert ModelChat(tokenizer, response_template="glm4_moe").reader_name == "glm4_moe"  # given, it wins


def test_a_response_template_file_that_is_not_json_is_named_with_its_line(tmp_path):
    bad = tmp_path / "reader.json"
    bad.write_text('{\n  "start_anchor": "<|assistant|>",\n  oops\n}')
    with pytest.raises(UnreadableTemplate, match=r"reader.json: line 3: not JSON"):
        chat_for("glm4moe", response_template=str(bad))
    with pytest.raises(UnreadableTemplate, match="neither a known format"):
        chat_for("glm4moe", response_template=str(tmp_path / "missing.json"))


def test_template_style_is_refused_for_a_template_that_renders_no_calls():
    with pytest.raises(UnreadableTemplate, match="renders no tool calls"):
        ModelChat(tiny_tokenizer(template_text("phi3.jinja")), "template")
    assert ModelChat(tiny_tokenizer(template_text("phi3.jinja"))).style == "hermes"


def test_no_chat_template_is_a_template_error_naming_the_fix():
    tokenizer = tiny_tokenizer(template_text("qwen3.jinja"))
    tokenizer.chat_template = None
    with pytest.raises(TemplateError, match="--chat-template-path"):
        ModelChat(tokenizer)


# -- the server ------------------------------------------------------------------------------------------

class RecordedGenerator:
    """Stands in for the model behind ChatService: keeps the prompt it was given and answers with a RECORDED reply
    (what the family's template writes for a call turn)."""

    def __init__(self, tokenizer, reply: str):
        self.tokenizer, self.reply, self.prompts = tokenizer, reply, []

    def submit(self, job):
        from concurrent.futures import Future

        self.prompts.append(self.tokenizer.decode(job.prompt_ids))
        ids = self.tokenizer(self.reply, add_special_tokens=False)["input_ids"]
        done = Future()
        done.set_result([Completion(self.tokenizer.decode(ids, skip_special_tokens=True), ids, "stop")] * job.n)
        return done


def test_the_server_renders_tools_through_a_tool_aware_template_and_reads_the_reply_its_familys_way():
    chat = chat_for("glm4moe")
    reply, _ = chat.generated_text(QUESTION, CALL, [WEATHER])
    generator = RecordedGenerator(chat.tokenizer, reply)
    service = ChatService(generator, "tiny-glm", chat=chat)
    completion = service.complete({"messages": QUESTION, "tools": [WEATHER]})
    assert generator.prompts[0] == chat.render(QUESTION, [WEATHER], True)  # GLM's own tool list, no Hermes block
    assert "<arg_key>{arg-key-1}</arg_key>" in generator.prompts[0] and "<tool_call></tool_call>" not in \
        generator.prompts[0]
    [choice] = completion["choices"]
    assert choice["finish_reason"] == "tool_calls"
    [made] = choice["message"]["tool_calls"]
    assert made["function"]["name"] == "get_weather"
    assert json.loads(made["function"]["arguments"]) == {"city": "Oslo", "days": 3, "metric": True}
    assert choice["message"]["reasoning_content"] == "The user wants a forecast."


def test_the_server_reads_a_harmony_reply_whose_markers_are_special_tokens():
    """gpt-oss's channel markers are special tokens: the reply is read before they are dropped from the text."""
    chat = chat_for("gptoss")
    reply, _ = chat.generated_text(QUESTION, {**CALL, "reasoning_content": None}, [WEATHER])
    service = ChatService(RecordedGenerator(chat.tokenizer, reply), "tiny-gpt-oss", chat=chat)
    [choice] = service.complete({"messages": QUESTION, "tools": [WEATHER]})["choices"]
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]


def test_serving_a_checkpoint_whose_calls_cannot_be_read_stops_at_start_in_one_line(tmp_path):
    """`astra-core serve --model DIR` on a tiny random-init checkpoint whose template writes <call> blocks."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer(template_text("qwen2_5.jinja").replace("<tool_call>", "<call>")
                               .replace("</tool_call>", "</call>"))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    done = subprocess.run([str(Path(sys.executable).parent / "astra-core"), "serve", "--model", str(tmp_path / "model"),
                           "--port", "0"], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "--response-template" in errors[0] and "Traceback" not in done.stderr
