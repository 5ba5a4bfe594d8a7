"""Conversations <-> token ids, exactly as the policy is served.

Two renderings:
- hermes: `astra_core.chat_format.to_template_messages` (tools in the system prompt, `<tool_call>`
  blocks, tool results as `<tool_response>` user turns) through the tokenizer's plain chat
  template. This is what `astra-core serve` does, so training matches serving.
- template: the tokenizer's own tool-aware chat template (`apply_chat_template(..., tools=...)`),
  for models such as Qwen2.5/Qwen3 that have one.

Everything is built by rendering whole conversations and taking differences of the rendered text,
so the tokens of an observation are exactly those the template would produce in context.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from astra_core.chat_format import ParsedCall, parse_reply, to_template_messages

_CALL_BLOCK = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)
_PROBE = "\u2402probe\u2402"


class TemplateError(ValueError):
    """The chat template does not render conversations incrementally (a later turn rewrites an earlier one)."""


@dataclass
class Reply:
    """One assistant turn as the policy wrote it: prose, well-formed calls, and unreadable call blocks."""

    content: str
    calls: list[ParsedCall] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # why each bad block could not be read


def openai_tool(tool: dict) -> dict:
    """A tool as chat templates and endpoints expect it (our `output_schema` stripped)."""
    return {"type": "function", "function": tool["function"]}


class ChatRenderer:
    """Renders OpenAI-format conversations to text/token ids for one tokenizer, and parses replies."""

    def __init__(self, tokenizer, style: str = "auto"):
        self.tokenizer = tokenizer
        template = tokenizer.chat_template or ""
        if style == "auto":
            style = "template" if "tools" in template else "hermes"
        if style not in ("hermes", "template"):
            raise ValueError(f"chat style must be hermes, template or auto, got {style!r}")
        self.style = style
        # Calls are <tool_call> JSON blocks unless the model's own template writes bare JSON (Llama 3.x).
        self.call_style = "json" if style == "template" and "<tool_call>" not in template else "hermes"
        self.stop_ids = stop_token_ids(tokenizer)
        self.turn_suffix = self._probe_turn_suffix()
        stop_texts = [tokenizer.decode([i]) for i in self.stop_ids]
        # What the template writes after the stop token the model generated (ChatML: "\n").
        self.after_stop = next((self.turn_suffix[len(s):] for s in stop_texts if s and self.turn_suffix.startswith(s)),
                               self.turn_suffix)

    # -- rendering ------------------------------------------------------------------------------
    def template_messages(self, messages: list[dict], tools: list[dict] | None) -> list[dict]:
        if self.style == "hermes":
            return to_template_messages(messages, tools or None)
        out = []
        for message in messages:
            message = {k: v for k, v in message.items() if v is not None}
            if message.get("tool_calls"):
                message["tool_calls"] = [_call_with_dict_arguments(c) for c in message["tool_calls"]]
            out.append(message)
        return out

    def _render(self, template_messages: list[dict], tools: list[dict] | None, generation_prompt: bool) -> str:
        kwargs = {"tools": [openai_tool(t) for t in tools]} if self.style == "template" and tools else {}
        return self.tokenizer.apply_chat_template(template_messages, tokenize=False,
                                                  add_generation_prompt=generation_prompt, **kwargs)

    def render(self, messages: list[dict], tools: list[dict] | None = None, generation_prompt: bool = False) -> str:
        return self._render(self.template_messages(messages, tools), tools, generation_prompt)

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _probe_turn_suffix(self) -> str:
        """The text a template writes after an assistant message's content (ChatML: '<|im_end|>\\n')."""
        probe = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
        text = self._render(self.template_messages(probe, None), None, False)
        return text[text.rindex(_PROBE) + len(_PROBE):]

    # -- whole conversations (SFT, and the re-tokenization check of rollouts) -------------------
    def encode(self, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
        """(token ids, assistant mask): 1 on every token of an assistant turn's content and its end token."""
        rendered = self.template_messages(messages, tools)
        spans = []
        for index, message in enumerate(rendered):
            if message["role"] != "assistant":
                continue
            before = self._render(rendered[:index], tools, True)
            through = self._render(rendered[:index + 1], tools, False)
            if not through.startswith(before):
                raise TemplateError("the chat template renders the conversation before an assistant turn "
                                    "differently once the turn is added; cannot locate assistant tokens")
            end = len(through) - len(self.after_stop) if through.endswith(self.after_stop) else len(through)
            spans.append((len(before), end))
        text = self._render(rendered, tools, False)
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        mask = [int(any(a <= start < b for a, b in spans)) for start, _ in encoded["offset_mapping"]]
        return list(encoded["input_ids"]), mask

    # -- rollouts --------------------------------------------------------------------------------
    def prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        return self.encode_text(self.render(messages, tools, generation_prompt=True))

    def observation_ids(self, conversation: list[dict], observations: list[dict], tools: list[dict] | None,
                        stopped: bool) -> list[int]:
        """Tokens between the policy's last generated token and its next turn.

        `conversation` ends with the assistant turn just played; `observations` are the messages
        (tool results) that follow it. `stopped`: the turn ended with a stop token (else it was cut
        at its length budget, and the template's whole end-of-turn text is added).
        """
        before = self.render(conversation, tools)
        after = self.render(conversation + observations, tools, generation_prompt=True)
        if not after.startswith(before):
            raise TemplateError("the chat template rewrites earlier turns when observations are added")
        glue = self.after_stop if stopped else self.turn_suffix
        return self.encode_text(glue + after[len(before):])

    def closing_ids(self, stopped: bool) -> list[int]:
        """What the template adds after the final generated turn (for the re-tokenization check)."""
        return self.encode_text(self.after_stop if stopped else self.turn_suffix)

    # -- parsing ---------------------------------------------------------------------------------
    def parse(self, text: str) -> Reply:
        if self.call_style == "json":
            return _parse_json_call(text)
        calls: list[ParsedCall] = []
        malformed: list[str] = []
        kept: list[str] = []  # prose and unreadable blocks stay in the content: they are what the model wrote
        position = 0
        for match in _CALL_BLOCK.finditer(text):
            kept.append(text[position:match.start()])
            parsed = parse_reply(match.group(0))
            if parsed.calls:
                calls.extend(parsed.calls)
            else:
                malformed.extend(parsed.malformed or [f"unreadable tool call: {match.group(0)[:200]}"])
                kept.append(match.group(0))
            position = match.end()
        kept.append(text[position:])
        return Reply(content="".join(kept).strip(), calls=calls, malformed=malformed)


def _parse_json_call(text: str) -> Reply:
    """Llama-3.x style: the whole reply is one JSON object {"name", "parameters"|"arguments"}."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return Reply(content=text.strip())
    try:
        payload = json.loads(stripped)
    except json.JSONDecodeError as exc:
        return Reply(content=stripped, malformed=[f"tool call is not valid JSON ({exc.msg}): {stripped[:200]}"])
    arguments = payload.get("parameters", payload.get("arguments", {})) if isinstance(payload, dict) else None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) or not isinstance(arguments, dict):
        return Reply(content=stripped, malformed=[f"tool call needs a string 'name' and object arguments: "
                                                  f"{stripped[:200]}"])
    return Reply(content="", calls=[ParsedCall(payload["name"], arguments)])


def _call_with_dict_arguments(call: dict) -> dict:
    function = dict(call["function"])
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return {**call, "function": function}


def stop_token_ids(tokenizer) -> list[int]:
    """Token ids that end an assistant turn: EOS and the chat template's end-of-turn token."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    vocab = tokenizer.get_vocab()
    for token in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        if token in vocab and token in (tokenizer.chat_template or ""):
            ids.add(vocab[token])
    return sorted(ids)
