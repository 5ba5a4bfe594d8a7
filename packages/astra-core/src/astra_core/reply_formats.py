"""How each model family writes an assistant turn: the response templates the toolkit knows.

A chat template says how a conversation is laid out for a model; it does not say how to read back what
the model writes. transformers reads replies with a declarative *response template* (a tokenizer's
`response_template`, transformers >= 5.13: where reasoning, prose and tool calls begin and end, and how
each is parsed). Checkpoints have started to carry one; most do not yet. For those, this table holds one
per family the toolkit supports, written by us in transformers' format and read by transformers' own
parser (`astra_core.local.replies`); `tests/test_template_matrix.py` of astra-grpo holds every entry to
the templates its families ship, and to what TRL's `add_response_schema` reads where TRL knows the template.

An entry is picked by what the chat template writes, not by its bytes: the template renders a probe
call, and the first entry that reads it back (name, typed arguments, reasoning, prose) wins. So a new
revision of a known template needs nothing here, and a template whose calls no entry reads is an error
at start-up naming the fix (`--response-template`).

Plain data: importing this module needs neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["REPLY_FORMATS", "ReplyFormat", "reply_format"]


@dataclass(frozen=True)
class ReplyFormat:
    """One family's way of writing a turn, and of ending it."""

    name: str
    families: str                   # the models that write it (for the docs)
    example: str                    # what one call looks like (for the docs)
    response_template: dict         # transformers' declarative response template
    ends_turn: tuple[str, ...]      # tokens that end an assistant turn (generation stops on them)
    hands_to_tools: tuple[str, ...] = ()  # those of them that end a turn of calls: the tool results follow
    # How the model writes reasoning inline, in its text, where the template renders none (None: it never does)
    reasoning_tags: tuple[str, str] | None = ("<think>", "</think>")
    # In history the template writes another token where the model ended its turn (gpt-oss: `<|end|>` for `<|return|>`)
    renders_end_as: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what a trainer must know about the family's layout (for the docs)


def _template(fields: dict, *, anchor: str | None = None, anchor_pattern: str | None = None) -> dict:
    """A response template: where the assistant's turn starts in the prompt (after the last match), its fields."""
    start = {"start_anchor": anchor} if anchor is not None else {"start_anchor_pattern": anchor_pattern}
    return {**start, "defaults": {"role": "assistant"}, "fields": fields}


def _call(content: str, content_args: dict | None = None, **delimiters: str) -> dict:
    """A field of repeated tool calls: the open pattern captures the name (or the body is the call's JSON object,
    with its name, when it captures none), the body holds the arguments."""
    named = "(?P<name>" in delimiters.get("open_pattern", "")
    function = {"name": "{name}", "arguments": "{content}"} if named else "{content}"
    field = {**delimiters, "content": content, "repeats": True, "transform": {"type": "function", "function": function}}
    if content_args:
        field["content_args"] = content_args
    return field


_THINK = {"open": "<think>", "close_pattern": r"</think>\s*", "content": "text"}
_CHATML_CONTENT = {"close_pattern": r"(?:<\|im_end\|>|<\|endoftext\|>)\s*", "content": "text"}
_RAW_TEXT = {"name": "text", "args": {"strip": False}}  # values as written; the tool's JSON schema types them
# Qwen3.5 and Nemotron 3 write each argument's value as raw text: "75001" and 75001 look the same, so the tool's
# JSON schema decides the type (transformers casts them when the parser is given the tools).
_XML_PARAMETERS = {"tag_pattern": r"<parameter=(?P<key>[^>\n]+)>\n?(?P<value>.*?)\n?</parameter>",
                   "value_parser": _RAW_TEXT}

QWEN3 = ReplyFormat(
    name="qwen3",
    families="Qwen2.5, Qwen3, Qwen3-2507, Qwen3-VL, Hermes-style templates",
    example='<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>',
    response_template=_template({
        "reasoning_content": _THINK,
        "tool_calls": _call("json", open="<tool_call>", close_pattern=r"</tool_call>\s*"),
        "content": _CHATML_CONTENT,
    }, anchor="<|im_start|>assistant\n"),
    ends_turn=("<|im_end|>",),
)

QWEN3_5 = ReplyFormat(
    name="qwen3_5",
    families="Qwen3.5, Qwen3.6, Qwen3.8, Nemotron 3 (Nano, Super, Ultra), Nemotron 3.5 Lightning",
    example="<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
    # The generation prompt opens the reasoning block (`<think>` and a newline, or an empty block when thinking is
    # off). A reply is reasoning up to a `</think>` it writes; one that writes none is read as prose and calls (a
    # call is never lost in an unclosed reasoning block).
    response_template=_template({
        "reasoning_content": {"open_pattern": r"(?:<think>)?(?=[\s\S]*?</think>)", "close_pattern": r"</think>\s*",
                              "content": "text"},
        "tool_calls": _call("xml-inline", _XML_PARAMETERS, open_pattern=r"<tool_call>\s*<function=(?P<name>[^>\n]+)>",
                            close_pattern=r"</tool_call>\s*"),
        "content": _CHATML_CONTENT,
    }, anchor_pattern=r"<\|im_start\|>assistant\n(?:<think>(?:</think>|\n)?)?"),
    ends_turn=("<|im_end|>",),
    notes=("the generation prompt opens `<think>`: a reply reasons until `</think>`",),
)

GLM4_MOE = ReplyFormat(
    name="glm4_moe",
    families="GLM-4.5, GLM-4.6 (GLM-4-MoE)",
    example="<tool_call>f\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
    response_template=_template({
        "reasoning_content": _THINK,
        "tool_calls": _call("xml-inline", {
            "tag_pattern": r"<arg_key>(?P<key>[^<]+)</arg_key>\s*<arg_value>(?P<value>.*?)</arg_value>",
            "value_parser": _RAW_TEXT}, open_pattern=r"<tool_call>(?P<name>[^\n<]+)\n?", close_pattern=r"</tool_call>\s*"),
        "content": {"close_pattern": r"(?:<\|user\|>|<\|observation\|>|<\|endoftext\|>)\s*", "content": "text"},
    }, anchor="<|assistant|>"),
    ends_turn=("<|user|>", "<|observation|>", "<|endoftext|>"),
    hands_to_tools=("<|observation|>",),
    notes=("no end-of-turn token of its own: a turn ends on the role token of what follows (`<|observation|>` "
           "before tool results, `<|user|>` otherwise), which the template writes as part of the next message",
           "reasoning is rendered only for turns after the last user message"),
)

LLAMA3_JSON = ReplyFormat(
    name="llama3_json",
    families="Llama 3.1, Llama 3.2",
    example='{"name": "f", "parameters": {"x": 1}}',
    response_template=_template({
        "tool_calls": _call("json", open_pattern=r'^\s*\{\s*"name":\s*"(?P<name>[^"]+)",\s*"(?:parameters|arguments)":\s*',
                            close_pattern=r"\}\s*(?:<\|eot_id\|>|<\|eom_id\|>|$)"),
        "content": {"close_pattern": r"(?:<\|eot_id\|>|<\|eom_id\|>)\s*", "content": "text"},
    }, anchor="<|start_header_id|>assistant<|end_header_id|>\n\n"),
    ends_turn=("<|eot_id|>", "<|eom_id|>"),
    notes=("one call per turn: the template refuses two, so a turn that writes two is one malformed call",),
)

GPT_OSS = ReplyFormat(
    name="gpt_oss",
    families="gpt-oss (harmony)",
    example="<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{\"x\": 1}<|call|>",
    response_template=_template({
        "thinking": {"open": "<|channel|>analysis<|message|>", "close_pattern": r"<\|end\|>\s*", "content": "text"},
        "content": {"open": "<|channel|>final<|message|>", "close_pattern": r"(?:<\|return\|>|<\|end\|>)\s*",
                    "content": "text"},
        "tool_calls": _call("json", open_pattern=r"to=functions\.(?P<name>[^\s<]+)\s*<\|channel\|>commentary"
                                                 r"(?:\s*<\|constrain\|>)?(?:\s*json)?<\|message\|>",
                            close_pattern=r"<\|call\|>\s*"),
    }, anchor="<|start|>assistant"),
    ends_turn=("<|return|>", "<|call|>"),
    hands_to_tools=("<|call|>",),
    reasoning_tags=None,
    renders_end_as={"<|return|>": "<|end|>"},
    notes=("one call per turn: a call ends the turn at `<|call|>` (the template renders only a turn's first call)",
           "`<|return|>` ends the final answer; in history the template writes `<|end|>` there and drops the "
           "analysis of turns before a final answer, so a finished episode re-renders differently (counted)"),
)

GEMMA4 = ReplyFormat(
    name="gemma4",
    families="Gemma 4, DiffusionGemma",
    example="<|tool_call>call:f{x:1}<tool_call|>",
    # After the tool results the model goes on in the same turn, with no new header.
    response_template=_template({
        "reasoning_content": {"open": "<|channel>thought\n", "close_pattern": r"<channel\|>\s*", "content": "text"},
        "tool_calls": _call("json", {"string_delims": [['<|"|>', '<|"|>']], "unquoted_keys": True},
                            open_pattern=r"<\|tool_call>call:(?P<name>[\w.\-]+)", close_pattern=r"<tool_call\|>\s*"),
        "content": {"close_pattern": r"(?:<turn\|>|<\|tool_response>|<eos>)\s*", "content": "text"},
    }, anchor_pattern=r"<\|turn>model\n|<tool_response\|>"),
    ends_turn=("<turn|>", "<|tool_response>", "<eos>"),
    hands_to_tools=("<|tool_response>",),
    reasoning_tags=None,
    notes=("a call hands over at `<|tool_response>`; the results and the next reply stay in the same model turn; "
           "prose beside a call is rendered after its results (counted)",),
)

# LFM2.5 writes a turn's calls as one Python-style list: each call opens at '[' or at the ',' after the previous
# one; a value is a quoted string, a list or mapping (nested up to two levels) or a bare literal.
_LFM2_VALUE = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\[(?:[^\[\]]|\[[^\[\]]*\])*\]|\{(?:[^{}]|\{[^{}]*\})*\}|[^,)]*"

LFM2 = ReplyFormat(
    name="lfm2",
    families="LFM2 (v2 template), LFM2.5, LFM2.5-VL",
    example="<|tool_call_start|>[f(x=1)]<|tool_call_end|>",
    response_template=_template({
        "thinking": _THINK,
        "tool_calls": _call("xml-inline", {
            "tag_pattern": rf"(?P<key>\w+)=(?P<value>{_LFM2_VALUE})",
            "value_parser": {"name": "json", "args": {"string_delims": [["'", "'"]], "allow_non_json": True}}},
            open_pattern=r"(?:<\|tool_call_start\|>\s*\[|,)\s*(?P<name>[A-Za-z_][\w.\-]*)\(",
            close_pattern=r"\)\s*(?:\]\s*<\|tool_call_end\|>)?\s*"),
        "content": _CHATML_CONTENT,
    }, anchor="<|im_start|>assistant\n"),
    ends_turn=("<|im_end|>",),
    notes=("Python-literal arguments: `True`/`None` come back typed only where the tool's schema types them",),
)

DEEPSEEK_V3 = ReplyFormat(
    name="deepseek_v3",
    families="DeepSeek-V3",
    example="<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"x\": 1}\n```"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    # After the tool outputs the model goes on with no new header.
    response_template=_template({
        "reasoning_content": _THINK,
        "tool_calls": _call("json", open_pattern=r"(?:<｜tool▁calls▁begin｜>)?\s*<｜tool▁call▁begin｜>(?:function)?"
                                                 r"<｜tool▁sep｜>(?P<name>[^\n]+)\n```(?:json)?\n",
                            close_pattern=r"\n?```\s*<｜tool▁call▁end｜>\s*(?:<｜tool▁calls▁end｜>)?\s*"),
        "content": {"close_pattern": r"<｜end▁of▁sentence｜>\s*", "content": "text"},
    }, anchor_pattern=r"<｜Assistant｜>|<｜tool▁outputs▁end｜>"),
    ends_turn=("<｜end▁of▁sentence｜>",),
    notes=("the generation prompt opens `<think>`, which the template's render of past turns drops: the policy "
           "closes it with `</think>` before its answer or calls, and a finished episode re-renders without it "
           "(counted)",
           "the template renders a second round of calls in one conversation without its opening tokens "
           "(counted)"),
)

MUSE_GLIMMER = ReplyFormat(
    name="muse_glimmer",
    families="Muse Glimmer (ATEM)",
    example='<|start|>assistant to=f<|message|><atem:function_calls>\n<atem:invoke name="f">\n'
            '<atem:parameter name="x">1</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
    response_template=_template({
        "reasoning_content": {"open": " to=self<|message|>", "close_pattern": r"<\|eom\|>\s*(?:<\|start\|>assistant)?",
                              "content": "text"},
        "tool_calls": _call("xml-inline", {
            "tag_pattern": r'<atem:parameter name="(?P<key>[^"]+)">(?P<value>.*?)</atem:parameter>',
            "value_parser": _RAW_TEXT}, open_pattern=r'<atem:invoke name="(?P<name>[^"]+)">',
            close_pattern=r"</atem:invoke>\s*"),
        "content": {"open": " to=user<|message|>", "close_pattern": r"(?:<\|eot\|>|<\|eom\|>)\s*", "content": "text"},
    }, anchor="<|start|>assistant"),
    ends_turn=("<|eot|>",),
    reasoning_tags=None,
    notes=("each channel is a message of its own (`to=self` reasoning, `to=TOOL` calls, `to=user` prose); "
           "prose beside calls is not rendered",),
)

REPLY_FORMATS: dict[str, ReplyFormat] = {f.name: f for f in (QWEN3, QWEN3_5, GLM4_MOE, LLAMA3_JSON, GPT_OSS,
                                                              GEMMA4, LFM2, DEEPSEEK_V3, MUSE_GLIMMER)}


def reply_format(name: str) -> ReplyFormat:
    """A known format by name; a KeyError listing them otherwise."""
    try:
        return REPLY_FORMATS[name]
    except KeyError:
        raise KeyError(f"no reply format named {name!r} (known: {', '.join(REPLY_FORMATS)})") from None
