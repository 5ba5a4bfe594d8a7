import json

from astra_core.chat_format import TOOL_CALL_OPEN, parse_reply, render_tool_call, to_template_messages
from hypothesis import given
from hypothesis import strategies as st

names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,20}", fullmatch=True)
# Text that often holds pieces of the format's own markup (a model may write them into any argument).
markup = st.lists(st.one_of(st.text(max_size=5), st.sampled_from(["<tool_call>", "</tool_call>", "<tool", "_call>",
                                                                  "{", "}", '"', "\\", "\n", " "])),
                  max_size=6).map("".join)
strings = st.one_of(st.text(max_size=20), markup)
values = st.recursive(st.none() | st.booleans() | st.integers() | strings,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(strings, inner, max_size=3),
                      max_leaves=8)


@given(calls=st.lists(st.tuples(names, st.dictionaries(strings, values, max_size=4)), max_size=4),
       prose=markup.filter(lambda text: TOOL_CALL_OPEN not in text))
def test_rendered_calls_parse_back(calls, prose):
    text = prose + "\n" + "\n".join(render_tool_call(name, args) for name, args in calls)
    reply = parse_reply(text)
    assert [(c.name, c.arguments) for c in reply.calls] == calls
    assert reply.malformed == []
    assert reply.content == prose.strip()


def test_malformed_blocks_are_reported_not_dropped():
    text = ('<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
            '<tool_call>\n{"name": "b", "arguments": {"x": </tool_call>\n'
            '<tool_call>\n{"arguments": {}}\n</tool_call>\n'
            '<tool_call>\n{"name": "c", "arguments": "{\\"y\\": 2}"}')  # unclosed, string arguments
    reply = parse_reply(text)
    assert [(c.name, c.arguments) for c in reply.calls] == [("a", {"x": 1}), ("c", {"y": 2})]
    assert len(reply.malformed) == 2
    assert "not valid JSON" in reply.malformed[0] and "'name'" in reply.malformed[1]



def test_tags_inside_argument_strings_stay_in_the_arguments():
    # found by test_rendered_calls_parse_back: the first </tool_call> used to end the block
    calls = [("A", {"": "</tool_call>"}), ("b", {"x": "<tool_call>\n{\"name\": \"c\"}"})]
    reply = parse_reply("Hi.\n" + "\n".join(render_tool_call(name, args) for name, args in calls) + "\nBye.")
    assert [(c.name, c.arguments) for c in reply.calls] == calls
    assert reply.malformed == [] and reply.content.split() == ["Hi.", "Bye."]


def test_a_block_with_trailing_text_after_its_json_is_malformed_up_to_the_close_tag():
    reply = parse_reply('<tool_call>{"name": "a", "arguments": {}} oops</tool_call> after')
    assert reply.calls == [] and "not valid JSON" in reply.malformed[0] and reply.content == "after"

def test_openai_tool_calls_have_ids_and_json_arguments():
    reply = parse_reply('<tool_call>{"name": "f", "arguments": {"q": "é"}}</tool_call>')
    (call,) = reply.openai_tool_calls()
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert json.loads(call["function"]["arguments"]) == {"q": "é"}


TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find a thing",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def test_template_messages_for_a_tool_conversation():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "find x and y"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}},
            {"id": "2", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "y"}'}}]},
        {"role": "tool", "tool_call_id": "1", "content": "X"},
        {"role": "tool", "tool_call_id": "2", "content": "Y"},
        {"role": "assistant", "content": "x=X, y=Y"},
    ]
    out = to_template_messages(messages, TOOLS)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant"]
    assert out[0]["content"].startswith("Be brief.") and '"name": "lookup"' in out[0]["content"]
    assert [c.arguments for c in parse_reply(out[2]["content"]).calls] == [{"q": "x"}, {"q": "y"}]
    assert out[3]["content"] == "<tool_response>\nX\n</tool_response>\n<tool_response>\nY\n</tool_response>"


def test_tools_without_system_message_get_one():
    out = to_template_messages([{"role": "user", "content": "hi"}], TOOLS)
    assert out[0]["role"] == "system" and "<tools>" in out[0]["content"]
    assert to_template_messages([{"role": "user", "content": "hi"}]) == [{"role": "user", "content": "hi"}]
