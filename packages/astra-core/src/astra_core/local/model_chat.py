"""A model's own chat conventions, read off its tokenizer: how a conversation is rendered for it, how its
replies are read back, and which tokens end its turns.

Two styles:
- `template`: the chat template renders tools and tool calls itself (Qwen3, Qwen3.5, GLM-4.5, gpt-oss,
  Gemma 4, ...). Conversations go through it with `tools=`; a reply is read with a response template
  (transformers' parser): the one given (`--response-template`), else the checkpoint's own
  `response_template`, else the first of `astra_core.reply_formats` that reads back what the chat template
  writes for probe turns (a call with typed arguments, reasoning and a call, prose). The chosen one must
  read those probes back, or the chat is refused at start-up (`UnreadableTemplate`, naming the fix): a run
  whose calls are never read would train on reward 0 without a word.
- `hermes`: the template renders no tool calls (SmolLM2's ChatML, Gemma 3): tools are listed in the system
  prompt and calls are `<tool_call>` JSON blocks, exactly as `astra_core.chat_format` (the embedded server)
  does.

Turns end on the generation config's `eos_token_id` (a list in most checkpoints), the tokenizer's EOS, the
token the template writes right after an assistant's text, and the tokens the family's format ends a
turn with (`<|call|>`, `<|observation|>`, ... : `ReplyFormat.ends_turn`).
"""

from __future__ import annotations

import json
import os

from astra_core.chat_format import ParsedCall, content_text, parse_reply, to_template_messages
from astra_core.local.replies import (
    REASONING_KEYS,
    Reading,
    UnreadableTemplate,
    load_response_template,
    openai_tool,
    read_turn,
    said,
)
from astra_core.reply_formats import REPLY_FORMATS, ReplyFormat

__all__ = ["REASONING_MODES", "ModelChat", "Reading", "TemplateError", "UnreadableTemplate", "load_response_template",
           "openai_tool"]

REASONING_MODES = ("keep", "strip")
_PROBE = "\u2402probe\u2402"
_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_lookup", "description": "Look a city up.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "count": {"type": "integer"}},
                   "required": ["city", "count"]}}}
_PROBE_ARGUMENTS = {"city": "Oslo", "count": 3}
_PROBE_USER = {"role": "user", "content": "Which city?"}
_PROBE_RESULT = "\u2402result\u2402"


class TemplateError(ValueError):
    """The chat template cannot render this conversation the way it is asked to."""


class ModelChat:
    """One tokenizer's chat conventions: rendering, reply reading, stop tokens."""

    def __init__(self, tokenizer, style: str = "auto", *, reasoning: str = "keep", template_kwargs: dict | None = None,
                 response_template: str | None = None, generation_eos: int | list[int] | None = None):
        self.tokenizer = tokenizer
        if not tokenizer.chat_template:
            raise TemplateError("the tokenizer has no chat template (a base model?): give one with "
                                "--chat-template-path (a .jinja file, or the directory of a model whose template "
                                "to use, e.g. its instruct sibling)")
        if style not in ("auto", "hermes", "template"):
            raise ValueError(f"chat style must be hermes, template or auto, got {style!r}")
        if reasoning not in REASONING_MODES:
            raise ValueError(f"reasoning must be keep or strip, got {reasoning!r}")
        self.reasoning = reasoning
        self.template_kwargs = dict(template_kwargs or {})
        self.string_arguments = False  # DeepSeek-V3's template concatenates arguments as text
        self.reasoning_key: str | None = None
        self.format: ReplyFormat | None = None
        self.response_template: dict | None = None
        self.reader_name = "hermes"
        self.generation_eos = [i for i in (generation_eos if isinstance(generation_eos, list) else [generation_eos])
                               if i is not None]
        self.style = "template"
        renders_calls = self._renders_tool_calls()
        self.style = style if style != "auto" else ("template" if renders_calls else "hermes")
        if self.style == "template" and not renders_calls:
            raise UnreadableTemplate("chat format template: the chat template renders no tool calls (their names and "
                                     "arguments never appear in its render): use --chat-format hermes (tools in the "
                                     "system prompt, <tool_call> JSON) or auto")
        if self.style == "template":
            self.reasoning_key = self._reasoning_key()
        self.turn_end = self._turn_end_token()
        if self.style == "template":
            self._choose_reader(response_template)
        self.stop_ids = self._stop_ids()

    # -- rendering --------------------------------------------------------------------------------
    def template_messages(self, messages: list[dict], tools: list[dict] | None) -> list[dict]:
        """What the template is given for OpenAI-format messages: reasoning kept where the template reads it (or
        inline, as the family writes it, where it reads none), or stripped; calls' arguments as the template takes
        them (objects, or JSON text for DeepSeek-V3's)."""
        messages = [self._with_reasoning(m) if m["role"] == "assistant" else m for m in messages]
        if self.style == "hermes":
            return to_template_messages(messages, tools or None)
        out = []
        for message in messages:
            message = {k: v for k, v in message.items() if v is not None}
            if message.get("tool_calls"):
                message["tool_calls"] = [self._call_arguments(c) for c in message["tool_calls"]]
                # a call without text: "", which every template renders as nothing; some fail without the key
                # (DeepSeek-V3, LFM2) and others render a null as "None"
                message.setdefault("content", "")
            out.append(message)
        return out

    def render_raw(self, template_messages: list[dict], tools: list[dict] | None, generation_prompt: bool) -> str:
        kwargs = {"tools": [openai_tool(t) for t in tools]} if self.style == "template" and tools else {}
        try:
            return self.tokenizer.apply_chat_template(template_messages, tokenize=False,
                                                      add_generation_prompt=generation_prompt,
                                                      **kwargs, **self.template_kwargs)
        except Exception as exc:  # jinja2's TemplateError, or a template's raise_exception(...)
            roles = ", ".join(m["role"] for m in template_messages)
            raise TemplateError(f"the chat template cannot render [{roles}]: {exc}") from exc

    def render(self, messages: list[dict], tools: list[dict] | None = None, generation_prompt: bool = False) -> str:
        """The template's own render of a whole conversation (what an endpoint would be sent)."""
        return self.render_raw(self.template_messages(messages, tools), tools, generation_prompt)

    def generated_text(self, context: list[dict], message: dict, tools: list[dict] | None) -> tuple[str, str]:
        """(what the policy generates for assistant `message` after the prompt for `context`, what the template
        writes after it in its render of context + message: its end of turn). The first ends before the stop
        token; the second starts with it when the template writes one there (GLM writes none: the role token of
        the next message ends its turns)."""
        body = self._turn_body(context, message, tools)
        kept = body.rstrip()
        for stop in self._stop_texts():
            if kept.endswith(stop):
                return kept[:len(kept) - len(stop)], body[len(kept) - len(stop):]
        return body, ""

    def _turn_body(self, context: list[dict], message: dict, tools: list[dict] | None) -> str:
        """The template's text for `message` after the generation prompt for `context`, end of turn included."""
        bare_context = [self.without_reasoning(m) if m["role"] == "assistant" else m for m in context]
        # Templates that rewrite history change earlier turns once this one is added (gpt-oss drops their analysis
        # after a final answer): then the turn is rendered after them without their reasoning. A generation prompt
        # that closes the reasoning block (thinking off) leaves no room for this turn's: it is not written.
        candidates = [(context, message), (bare_context, message)]
        if self._message_reasoning(message):
            bare = self.without_reasoning(message)
            candidates += [(context, bare), (bare_context, bare)]
        for before, turn in candidates:
            try:
                prompt = self.render(before, tools, True)
                whole = self.render(before + [turn], tools, False)
            except TemplateError:
                break  # a context the template refuses (gpt-oss: a tool result after a reply it cannot read as a call)
            if whole.startswith(prompt):
                return whole[len(prompt):]
        else:
            prompt = self.render(bare_context, tools, True)
            if prompt.rstrip().endswith(self._think_tags()[0]):
                return self._after_prefill(prompt, self.render(bare_context + [message], tools, False), message)
        # The template renders this turn differently after this context than its generation prompt says (Gemma 4
        # continues a turn its prompt closed; DeepSeek-V3 drops the opening of a second round of calls), or cannot
        # render the context: the turn as it renders newest after a user's question, from the end of the
        # generation header the two share.
        prompt = self.render([_PROBE_USER], tools, True)
        whole = self.render([_PROBE_USER, message], tools, False)
        head = self.shared_head(prompt, whole)
        if head < len(self.render([_PROBE_USER], tools, False)):
            raise TemplateError("the chat template cannot render this assistant turn as its newest")
        return whole[head:]

    def _think_tags(self) -> tuple[str, str]:
        return (self.format.reasoning_tags if self.format else None) or ("<think>", "</think>")

    def _after_prefill(self, prompt: str, whole: str, message: dict) -> str:
        """The generated text where the generation prompt opens a reasoning block that the template's render of
        the turn does not hold (DeepSeek-V3 drops the block from the turns it renders; Nemotron 3 prefills
        `<think>\n` where a turn without reasoning renders `<think></think>`): what follows the part they share,
        the block closed first when the render does not close it."""
        common = self.shared_head(prompt, whole)
        body = whole[common:]
        think_close = self._think_tags()[1]
        if think_close in body:
            return body
        reasoning = self._message_reasoning(message) if self.reasoning == "keep" else ""
        return f"{reasoning}\n{think_close}\n\n{body.lstrip()}" if reasoning else f"{think_close}\n\n{body.lstrip()}"

    @staticmethod
    def shared_head(a: str, b: str) -> int:
        """The length of the longest common beginning of two texts that does not end inside a `<...>` tag (the
        DeepSeek-V3 prompt's `<think>` and a turn's `<｜tool▁calls▁begin｜>` share a `<`, not a token)."""
        common = len(os.path.commonprefix([a, b]))
        opened = a.rfind("<", 0, common)
        return opened if opened > a.rfind(">", 0, common) else common

    def without_reasoning(self, message: dict) -> dict:
        """The message without its reasoning (in any key, or inline before its text)."""
        message = {k: v for k, v in message.items() if k not in REASONING_KEYS}
        if isinstance(message.get("content"), str) and "</think>" in message["content"]:
            message["content"] = _split_reasoning(message["content"])[1]
        return message

    # -- reading replies ----------------------------------------------------------------------------
    def read(self, text: str, prefix: str, tools: list[dict] | None, stopped: bool = True) -> Reading:
        """A generated turn (`text`, without its stop token) read back; `prefix` is the prompt it continued,
        `stopped` whether it ended on a stop token (else it was cut short)."""
        if self.style == "hermes":
            reasoning, body = _split_reasoning(text)
            reply = parse_reply(body, keep_unreadable=True)  # what the model wrote stays in the record
            return Reading(reply.content, reply.calls, reply.malformed, reasoning)
        return read_turn(self.response_template, text, prefix, tools, stopped, self.reader_name)

    # -- probing the template ------------------------------------------------------------------------
    @staticmethod
    def _probe_call() -> dict:
        return {"id": "call_probe", "type": "function",
                "function": {"name": "probe_lookup", "arguments": json.dumps(_PROBE_ARGUMENTS)}}

    def _renders_tool_calls(self) -> bool:
        """The template renders a call's name and arguments and the tool's result (TRL's supports_tool_calling)."""
        messages = [_PROBE_USER, {"role": "assistant", "content": None, "tool_calls": [self._probe_call()]},
                    {"role": "tool", "tool_call_id": "call_probe", "name": "probe_lookup", "content": _PROBE_RESULT}]
        for as_text in (False, True):
            self.string_arguments = as_text
            try:
                rendered = self.render(messages, [_PROBE_TOOL])
            except TemplateError:
                continue
            return all(s in rendered for s in ("probe_lookup", "city", "Oslo", _PROBE_RESULT))
        self.string_arguments = False
        return False

    def _reasoning_key(self) -> str | None:
        """The message key the template renders reasoning from (None: it renders none), on a turn of prose or of
        calls (Gemma 4 renders it on calls only)."""
        for key in REASONING_KEYS:
            for turn in ({"content": "answer"}, {"content": "", "tool_calls": [self._probe_call()]}):
                probe = [_PROBE_USER, self._call_arguments_of({"role": "assistant", **turn, key: _PROBE})]
                try:
                    if _PROBE in self.render_raw(probe, [_PROBE_TOOL], False):  # the key as given, not moved
                        return key
                except TemplateError:
                    continue
        return None

    def _turn_end_token(self) -> str | None:
        """The special token the template writes right after an assistant's text (ChatML: `<|im_end|>`)."""
        probe = [_PROBE_USER, {"role": "assistant", "content": _PROBE}]
        try:
            text = self.render_raw(self.template_messages(probe, None), None, False)
        except TemplateError:
            return None
        after = text[text.rindex(_PROBE) + len(_PROBE):] if _PROBE in text else ""
        ids = self.tokenizer(after, add_special_tokens=False)["input_ids"] if after else []
        if ids and ids[0] in set(self.tokenizer.all_special_ids) | _added_special_ids(self.tokenizer):
            return self.tokenizer.convert_ids_to_tokens(ids[0])
        return None

    def _choose_reader(self, given: str | None) -> None:
        if given:
            name, template, known = load_response_template(given)
            candidates = [(name, template, known)]
        elif getattr(self.tokenizer, "response_template", None):
            candidates = [("the checkpoint's response_template", self.tokenizer.response_template, None)]
        else:
            candidates = [(f.name, f.response_template, f) for f in REPLY_FORMATS.values()]
        reasons = []
        for name, template, known in candidates:
            self.reader_name, self.response_template, self.format = name, template, known
            problem = self._misread_probe()
            if problem is None:
                return
            reasons.append(f"{name}: {problem}")
        fix = ("give --response-template FILE (a transformers response_template, as JSON) or NAME (one of: "
               f"{', '.join(REPLY_FORMATS)}), or --chat-format hermes")
        said = reasons[0] if len(reasons) == 1 else "no known format reads them"
        raise UnreadableTemplate(f"the chat template writes tool calls that cannot be read back ({said}): {fix}")

    def _misread_probe(self) -> str | None:
        """Why the current response template misreads what the chat template writes for the probe turns
        (None: it reads them all back)."""
        tools = [_PROBE_TOOL]
        call = {"role": "assistant", "content": None, "tool_calls": [self._probe_call()]}
        probes = [(call, None), ({"role": "assistant", "content": "The answer is Oslo."}, None),
                  ({**call, "reasoning_content": "I should look it up."}, "I should look it up.")]
        try:
            prefix = self.render([_PROBE_USER], tools, True)
            for message, reasoning in probes:
                text, _ = self.generated_text([_PROBE_USER], message, tools)
                reading = read_turn(self.response_template, text, prefix, tools, True, self.reader_name)
                wanted = [ParsedCall("probe_lookup", dict(_PROBE_ARGUMENTS))] if message.get("tool_calls") else []
                if reading.malformed or reading.calls != wanted:
                    return f"read {said(reading)} from {text[:160]!r}"
                if reading.content != (message["content"] or "") and (not wanted or reasoning is None):
                    return f"read the prose {reading.content!r} from {text[:160]!r}"
                # reasoning that the template writes must come back as reasoning (for a response template given
                # or carried by the checkpoint, reasoning left in the prose is its author's choice)
                if reasoning and reading.reasoning != reasoning and reasoning in text and self.format is not None:
                    return f"read the reasoning {reading.reasoning!r} from {text[:160]!r}"
        except (TemplateError, ValueError) as exc:
            return str(exc)
        return None

    # -- reasoning and calls as the template takes them -----------------------------------------------
    @staticmethod
    def _message_reasoning(message: dict) -> str:
        return next((message[k] for k in REASONING_KEYS if isinstance(message.get(k), str) and message[k]), "")

    def _with_reasoning(self, message: dict) -> dict:
        content = message.get("content")
        reasoning = self._message_reasoning(message)
        if isinstance(content, str) and "</think>" in content:
            inline, content = _split_reasoning(content)
            reasoning = reasoning or inline
        message = {k: v for k, v in message.items() if k not in REASONING_KEYS}
        message["content"] = content
        if self.reasoning == "strip" or not reasoning:
            return message
        if self.reasoning_key:
            return {**message, self.reasoning_key: reasoning}
        tags = self.format.reasoning_tags if self.format else ("<think>", "</think>")
        if tags is None:
            return message  # the template renders no reasoning and the family writes none inline: it is dropped
        return {**message, "content": f"{tags[0]}\n{reasoning}\n{tags[1]}\n\n{content_text(content)}"}

    def _call_arguments_of(self, message: dict) -> dict:
        if not message.get("tool_calls"):
            return message
        return {**message, "tool_calls": [self._call_arguments(c) for c in message["tool_calls"]]}

    def _call_arguments(self, call: dict) -> dict:
        function = dict(call["function"])
        arguments = function.get("arguments")
        if self.string_arguments and not isinstance(arguments, str):
            function["arguments"] = json.dumps(arguments, ensure_ascii=False)
        elif not self.string_arguments and isinstance(arguments, str):
            try:
                function["arguments"] = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        return {**call, "function": function}

    # -- stop tokens ---------------------------------------------------------------------------------
    def _stop_ids(self) -> list[int]:
        ids = set(self.generation_eos)
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        vocab = self.tokenizer.get_vocab()
        tokens = [self.turn_end] + list(self.format.ends_turn if self.format else ())
        ids |= {vocab[t] for t in tokens if t and t in vocab}
        return sorted(ids)

    def _stop_texts(self) -> list[str]:
        """The texts that end a turn, longest first (while the reader is being chosen: the candidate's)."""
        tokens = [self.turn_end, *(self.format.ends_turn if self.format else ()), self.tokenizer.eos_token,
                  *(self.tokenizer.decode([i]) for i in self.generation_eos)]
        return sorted({t for t in tokens if t}, key=len, reverse=True)

    def stop_texts(self) -> dict[int, str]:
        """Each stop id's text."""
        return {i: self.tokenizer.decode([i]) for i in self.stop_ids}

    @property
    def hands_to_tools(self) -> tuple[str, ...]:
        return self.format.hands_to_tools if self.format else ()


def _added_special_ids(tokenizer) -> set[int]:
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return {i for i, token in decoder.items() if getattr(token, "special", False)}


def _split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, the rest) of text that may start with a `<think>` block (or inside one, its `<think>` in the
    generation prompt)."""
    if "</think>" not in text:
        return "", text
    head, rest = text.split("</think>", 1)
    if "<think>" in head:
        before, head = head.split("<think>", 1)
        if before.strip():
            return "", text  # prose before the block: not a reasoning prefix
    return head.strip("\n"), rest.lstrip("\n")


