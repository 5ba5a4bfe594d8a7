"""Conversations <-> token ids, exactly as the policy is served, for any real chat template.

Two renderings:
- hermes: `astra_core.chat_format.to_template_messages` (tools in the system prompt, `<tool_call>`
  blocks, tool results as `<tool_response>` user turns) through the tokenizer's plain chat
  template. This is what `astra-core serve` does, so training matches serving.
- template: the tokenizer's own tool-aware chat template (`apply_chat_template(..., tools=...)`),
  for models such as Qwen2.5/Qwen3/Llama 3.x that have one.

Token accounting never re-renders an earlier turn. Real templates rewrite history: Qwen3 drops the
`<think>` block of every assistant turn but the last one after the latest user query, Gemma 3 trims
contents. So a conversation is laid out turn by turn, as a rollout produces it:

    prompt (the template's render of the messages before the first assistant turn, generation prompt
    included) | assistant text + end-of-turn token | observation text | assistant text + ... | closing

where an assistant turn's text is what the template writes for it as the *newest* turn (what the model
generates), and an observation's text is what the template writes for the new messages after a fixed
base conversation (verl's approach). SFT examples (`encode`) use the same layout as rollouts, so the
policy is trained on exactly the token sequences it meets when it acts. Where a template would render
the finished conversation differently (Qwen3's dropped reasoning), rollouts count it as a
re-tokenization mismatch; `docs` of astra-grpo list these per family.

Reasoning (`<think>...</think>` or a message's `reasoning_content`) is kept or stripped by `reasoning`:
- keep: SFT trains on it and rollout records carry it as `reasoning_content`;
- strip: it is removed from SFT targets and from the recorded messages (a live episode's context always
  holds the tokens the policy generated).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from astra_core.chat_format import ParsedCall, call_blocks, to_template_messages

_PROBE = "\u2402probe\u2402"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# Fixed base conversations that new messages are rendered after (the first a template accepts wins).
_BASE_USER = {"role": "user", "content": "\u2402base question\u2402"}
_BASE_ASSISTANT = {"role": "assistant", "content": "\u2402base answer\u2402"}
REASONING_MODES = ("keep", "strip")


class TemplateError(ValueError):
    """The chat template cannot render this conversation the way a rollout lays it out."""


@dataclass
class Reply:
    """One assistant turn as the policy wrote it: reasoning, prose, well-formed calls, unreadable call blocks."""

    content: str
    calls: list[ParsedCall] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # why each bad block could not be read
    reasoning: str = ""


def openai_tool(tool: dict) -> dict:
    """A tool as chat templates and endpoints expect it (our `output_schema` stripped)."""
    return {"type": "function", "function": tool["function"]}


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, the rest) of a reply or message content. Handles a reply that starts inside the block
    (templates such as DeepSeek-R1's put `<think>` in the generation prompt)."""
    if _THINK_CLOSE not in text:
        return "", text
    head, rest = text.split(_THINK_CLOSE, 1)
    if _THINK_OPEN in head:
        before, head = head.split(_THINK_OPEN, 1)
        if before.strip():
            return "", text  # prose before the block: not a reasoning prefix
    return head.strip("\n"), rest.lstrip("\n")


class ChatRenderer:
    """Renders OpenAI-format conversations to text/token ids for one tokenizer, and parses replies."""

    def __init__(self, tokenizer, style: str = "auto", *, reasoning: str = "keep",
                 template_kwargs: dict | None = None):
        self.tokenizer = tokenizer
        template = tokenizer.chat_template or ""
        if not template:
            raise TemplateError("the tokenizer has no chat template (a base model?): give one with "
                                "--chat-template-path (a .jinja file, or the directory of a model whose template "
                                "to use, e.g. its instruct sibling)")
        if style == "auto":
            style = "template" if "tools" in template else "hermes"
        if style not in ("hermes", "template"):
            raise ValueError(f"chat style must be hermes, template or auto, got {style!r}")
        if reasoning not in REASONING_MODES:
            raise ValueError(f"reasoning must be keep or strip, got {reasoning!r}")
        self.style = style
        self.reasoning = reasoning
        self.template_kwargs = dict(template_kwargs or {})
        # Calls are <tool_call> JSON blocks unless the model's own template writes bare JSON (Llama 3.x).
        self.call_style = "json" if style == "template" and "<tool_call>" not in template else "hermes"
        self.stop_ids = stop_token_ids(tokenizer)
        self.turn_suffix = self._probe_turn_suffix()
        stop_texts = {i: tokenizer.decode([i]) for i in self.stop_ids}
        # The stop token that ends an assistant turn in this template, and what the template writes after it.
        self.turn_stop_id = next((i for i, s in stop_texts.items() if s and self.turn_suffix.startswith(s)),
                                 self.stop_ids[0] if self.stop_ids else None)
        stop_text = stop_texts.get(self.turn_stop_id, "")
        self.after_stop = self.turn_suffix[len(stop_text):] if self.turn_suffix.startswith(stop_text) \
            else self.turn_suffix
        self.renders_reasoning = self._probe_renders_reasoning()

    # -- rendering ------------------------------------------------------------------------------
    def template_messages(self, messages: list[dict], tools: list[dict] | None) -> list[dict]:
        messages = [self._with_reasoning(m) if m["role"] == "assistant" else m for m in messages]
        if self.style == "hermes":
            return to_template_messages(messages, tools or None)
        out = []
        for message in messages:
            message = {k: v for k, v in message.items() if v is not None}
            if message.get("tool_calls"):
                message["tool_calls"] = [_call_with_dict_arguments(c) for c in message["tool_calls"]]
                # a call without text: "", which every template renders as nothing; some fail without the key
                # (DeepSeek-R1-Distill, DeepSeek-V3, LFM2, Phi-3) and others render a null as "None"
                message.setdefault("content", "")
            out.append(message)
        return out

    def _render(self, template_messages: list[dict], tools: list[dict] | None, generation_prompt: bool) -> str:
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
        return self._render(self.template_messages(messages, tools), tools, generation_prompt)

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _tail(self, new: list[dict], tools: list[dict] | None, *, generation_prompt: bool,
              bases: tuple[list[dict], ...]) -> tuple[str, str]:
        """(text before, text the template writes for `new`) after the first base it renders unchanged."""
        errors = []
        for base in bases:
            try:
                before = self.render(base, tools, generation_prompt=not generation_prompt)
                after = self.render(base + new, tools, generation_prompt=generation_prompt)
            except TemplateError as exc:
                errors.append(str(exc))
                continue
            if after.startswith(before):
                return before, after[len(before):]
            errors.append("adding the messages re-renders the turns before them")
        roles = ", ".join(m["role"] for m in new)
        raise TemplateError(f"cannot render [{roles}] on its own with this chat template: {'; '.join(errors)}")

    def _probe_turn_suffix(self) -> str:
        """The text a template writes after an assistant message's content (ChatML: '<|im_end|>\\n')."""
        probe = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
        text = self._render(self.template_messages(probe, None), None, False)
        return text[text.rindex(_PROBE) + len(_PROBE):]

    def _probe_renders_reasoning(self) -> bool:
        probe = [{"role": "user", "content": "hi"},
                 {"role": "assistant", "content": "answer", "reasoning_content": _PROBE}]
        try:
            rendered = self._render([dict(m) for m in probe], None, False) if self.style == "template" else ""
        except TemplateError:
            return False
        return _PROBE in rendered

    # -- the rollout layout -----------------------------------------------------------------------
    def prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        return self.encode_text(self.render(messages, tools, generation_prompt=True))

    def assistant_text(self, message: dict, tools: list[dict] | None) -> str:
        """What the policy generates for this assistant message (up to, not including, its stop token)."""
        before, tail = self._tail([message], tools, generation_prompt=False, bases=([_BASE_USER],))
        if not tail.endswith(self.turn_suffix):
            raise TemplateError("the chat template does not end this assistant turn with "
                                f"{self.turn_suffix!r}; cannot locate the generated text")
        return tail[:len(tail) - len(self.turn_suffix)]

    def observation_ids(self, observations: list[dict], tools: list[dict] | None, stopped: bool) -> list[int]:
        """Tokens between the policy's last generated token and its next turn.

        `observations` are the messages (tool results, a user's reply) after the assistant turn just
        played. `stopped`: that turn ended with a stop token (else it was cut at its length budget, and
        the template's whole end-of-turn text is added). Rendered after a fixed base conversation, so no
        earlier turn is ever rendered again.
        """
        _, tail = self._tail(observations, tools, generation_prompt=True,
                             bases=([_BASE_USER, _BASE_ASSISTANT], [_BASE_USER]))
        glue = self.after_stop if stopped else self.turn_suffix
        return self.encode_text(glue + tail)

    def closing_ids(self, stopped: bool) -> list[int]:
        """What the template adds after the final generated turn (for the re-tokenization check)."""
        return self.encode_text(self.after_stop if stopped else self.turn_suffix)

    def encode(self, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
        """(token ids, assistant mask) of a finished conversation in the rollout layout: the mask is 1 on
        every assistant turn's generated tokens and its end-of-turn token. Messages after the last
        assistant turn are not part of the example."""
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not turns:
            raise TemplateError("the conversation has no assistant turn to train on")
        ids = self.prompt_ids(messages[:turns[0]], tools)
        mask = [0] * len(ids)
        for position, index in enumerate(turns):
            generated = self.encode_text(self.assistant_text(messages[index], tools)) + [self.turn_stop_id]
            ids += generated
            mask += [1] * len(generated)
            following = turns[position + 1] if position + 1 < len(turns) else None
            glue = (self.observation_ids(messages[index + 1:following], tools, stopped=True)
                    if following is not None else self.closing_ids(stopped=True))
            ids += glue
            mask += [0] * len(glue)
        return ids, mask

    # -- reasoning --------------------------------------------------------------------------------
    def _with_reasoning(self, message: dict) -> dict:
        """An assistant message with its reasoning kept where the template reads it, or stripped."""
        content = message.get("content")
        reasoning = message.get("reasoning_content") or ""
        if isinstance(content, str) and _THINK_CLOSE in content:
            inline, content = split_reasoning(content)
            reasoning = reasoning or inline
        message = {k: v for k, v in message.items() if k != "reasoning_content"}
        message["content"] = content
        if self.reasoning == "strip" or not reasoning:
            return message
        if self.renders_reasoning:
            return {**message, "reasoning_content": reasoning}
        return {**message, "content": f"{_THINK_OPEN}\n{reasoning}\n{_THINK_CLOSE}\n\n{content or ''}"}

    def assistant_message(self, reply: Reply, turn: int) -> dict:
        """The OpenAI message of a generated turn (reasoning as `reasoning_content` when kept)."""
        message: dict = {"role": "assistant", "content": reply.content or (None if reply.calls else "")}
        if reply.reasoning and self.reasoning == "keep":
            message["reasoning_content"] = reply.reasoning
        if reply.calls:
            message["tool_calls"] = [
                {"id": f"call_{turn}_{index}", "type": "function",
                 "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
                for index, call in enumerate(reply.calls)]
        return message

    # -- parsing ---------------------------------------------------------------------------------
    def parse(self, text: str) -> Reply:
        reasoning, body = split_reasoning(text)
        reply = _parse_json_call(body) if self.call_style == "json" else _parse_hermes(body)
        reply.reasoning = reasoning
        return reply


def _parse_hermes(text: str) -> Reply:
    calls: list[ParsedCall] = []
    malformed: list[str] = []
    kept: list[str] = []  # prose and unreadable blocks stay in the content: they are what the model wrote
    position = 0
    for start, end, parsed in call_blocks(text):
        kept.append(text[position:start])
        if isinstance(parsed, ParsedCall):
            calls.append(parsed)
        else:
            malformed.append(parsed)
            kept.append(text[start:end])
        position = end
    kept.append(text[position:])
    return Reply(content="".join(kept).strip(), calls=calls, malformed=malformed)


def _parse_json_call(text: str) -> Reply:
    """Llama-3.x style: the whole reply is one JSON object {"name", "parameters"|"arguments"}."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return Reply(content=stripped)
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
    for token in ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>"):
        if token in vocab and token in (tokenizer.chat_template or ""):
            ids.add(vocab[token])
    return sorted(ids)


def chat_renderer(tokenizer, config) -> ChatRenderer:
    """The renderer a trainer config asks for (`chat_format`, `reasoning`, `chat_template_kwargs`)."""
    return ChatRenderer(tokenizer, config.chat_format, reasoning=config.reasoning,
                        template_kwargs=config.chat_template_kwargs)
