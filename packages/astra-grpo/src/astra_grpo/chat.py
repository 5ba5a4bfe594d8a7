"""Conversations <-> token ids, exactly as the policy is served, for any real chat template.

How a conversation is rendered, how a reply is read and which tokens end a turn are the model's own:
`astra_core.local.model_chat.ModelChat` reads them off the tokenizer (the `hermes` style for templates
that know no tools, as `astra-core serve` does; the template's own tool rendering and its family's
response template otherwise; see that module and `astra_core.reply_formats`).

Token accounting never re-renders an earlier turn. Real templates rewrite history: Qwen3 drops the
`<think>` block of every assistant turn but the last one after the latest user query, gpt-oss drops the
analysis of turns before a final answer and writes `<|end|>` where the model wrote `<|return|>`, GLM-4.5
ends a turn with the next message's role token. So a conversation is laid out turn by turn, as a rollout
produces it:

    prompt (the template's render of the messages before the first assistant turn, generation prompt
    included) | generated text + stop token | continuation | generated text + stop token | ... | closing

- a turn's generated text is what the template writes for it right after what precedes it (the prompt,
  or the last continuation), up to the stop token that ends it;
- a continuation is what the template writes after that text when the turn's observations (tool results,
  a user's reply) follow it, up to the next generation prompt included, rendered after a fixed base
  conversation that ends with the turn itself (verl's approach: nothing earlier is rendered again), less
  the stop token the policy generated (the template writes it there, or its stand-in: gpt-oss's `<|end|>`
  for `<|return|>`; GLM writes it as the next message's first token).

SFT examples (`encode`) use the same layout as rollouts, so the policy is trained on exactly the token
sequences it meets when it acts, and the assistant mask is exact. Where a template would render the
finished conversation differently, rollouts count a re-tokenization mismatch; docs/model-families.md
lists these per family.

Reasoning (`<think>...</think>`, or a message's `reasoning_content`) is kept or stripped by `reasoning`:
- keep: SFT trains on it and rollout records carry it as `reasoning_content`;
- strip: it is removed from SFT targets and from the recorded messages (a live episode's context always
  holds the tokens the policy generated).
"""

from __future__ import annotations

import json

from astra_core.local.model_chat import REASONING_MODES, ModelChat, Reading, TemplateError, openai_tool

__all__ = ["REASONING_MODES", "ChatRenderer", "Reply", "TemplateError", "chat_renderer", "openai_tool"]

Reply = Reading  # one generated turn read back: content, reasoning, calls, malformed calls (why each)

# The fixed base conversation that new messages are rendered after.
_BASE_USER = {"role": "user", "content": "\u2402base question\u2402"}
_NEXT_USER = {"role": "user", "content": "\u2402next question\u2402"}
_PREFIX_TOKENS = 64  # the prompt's tail a reply is read against (its generation prompt, where the reader anchors)


class ChatRenderer:
    """Renders OpenAI-format conversations to text/token ids for one tokenizer, and reads replies."""

    def __init__(self, tokenizer, style: str = "auto", *, reasoning: str = "keep", template_kwargs: dict | None = None,
                 response_template: str | None = None, generation_eos: int | list[int] | None = None):
        self.chat = ModelChat(tokenizer, style, reasoning=reasoning, template_kwargs=template_kwargs,
                              response_template=response_template, generation_eos=generation_eos)
        self.tokenizer = tokenizer
        self.style = self.chat.style
        self.reasoning = reasoning
        self.stop_ids = self.chat.stop_ids
        self.stop_texts = self.chat.stop_texts()
        stand_ins = self.chat.format.renders_end_as if self.chat.format else {}
        # the texts the template may write where the policy's stop token stands, for each stop token
        self._stop_forms = {i: [t for t in (text, stand_ins.get(text)) if t] for i, text in self.stop_texts.items()}
        self._hands_to_tools = {i for i, text in self.stop_texts.items() if text in self.chat.hands_to_tools}

    @property
    def reader(self) -> str:
        """How replies are read: `hermes`, or the name of the response template."""
        return self.chat.reader_name

    # -- rendering ------------------------------------------------------------------------------
    def template_messages(self, messages: list[dict], tools: list[dict] | None) -> list[dict]:
        return self.chat.template_messages(messages, tools)

    def render(self, messages: list[dict], tools: list[dict] | None = None, generation_prompt: bool = False) -> str:
        """The template's own render of a whole conversation (what an endpoint would be sent)."""
        return self.chat.render(messages, tools, generation_prompt)

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    # -- the rollout layout -----------------------------------------------------------------------
    def prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        return self.encode_text(self.render(messages, tools, generation_prompt=True))

    def assistant_text(self, message: dict, tools: list[dict] | None, context: list[dict] | None = None) -> str:
        """What the policy generates for this assistant message after the conversation `context` (default: a fixed
        user turn), up to, not including, its stop token."""
        return self.chat.generated_text(context or [_BASE_USER], message, tools)[0]

    def turn_stop_id(self, message: dict, tools: list[dict] | None, following: list[dict]) -> int:
        """The stop token that ends this assistant turn when `following` comes after it (nothing: the end of the
        conversation): the one the template writes at the end of the turn, else at the start of what follows."""
        for continuation in (self._continuation(message, following, tools),
                             self._continuation(message, [_NEXT_USER], tools)):
            for stop_id, forms in self._stop_forms.items():
                if any(continuation.startswith(form) for form in forms):
                    return stop_id
        raise TemplateError("the chat template ends this assistant turn with no stop token: "
                            f"{self._continuation(message, following, tools)[:80]!r}")

    def observation_ids(self, message: dict, observations: list[dict], tools: list[dict] | None,
                        stop_id: int | None) -> list[int]:
        """Tokens between the policy's last generated token and its next turn.

        `message` is the assistant turn just played, `observations` the messages that answer it (tool results, a
        user's reply), `stop_id` the stop token the turn ended with (None: it was cut at its length budget, and
        the template's whole end of turn is added)."""
        return self.encode_text(self._glue(self._continuation(message, observations, tools), stop_id))

    def closing_ids(self, message: dict, tools: list[dict] | None, stop_id: int | None) -> tuple[list[int], bool]:
        """(what the template adds after the final generated turn, whether it writes the stop token there): the
        re-tokenization check compares with the template's render of the finished conversation, which ends
        without a stop token in families whose turns end on the next message's role token (GLM)."""
        closing = self._continuation(message, [], tools)
        writes_stop = stop_id is None or any(closing.startswith(form) for form in self._stop_forms.get(stop_id, []))
        return self.encode_text(self._glue(closing, stop_id)), writes_stop

    def _continuation(self, message: dict, following: list[dict], tools: list[dict] | None) -> str:
        """What the template writes after the policy's text for `message` when `following` comes next: its end of
        turn, `following`, and (when there is something) the next generation prompt. Rendered after a fixed base
        user turn, the message without its reasoning and, beside calls, its prose (what follows does not depend
        on them: Gemma 4 writes a turn's prose after its tool results, which would put it among them); the turn's
        text ends where the template writes its first stop token (or, in GLM, the next message's role token)."""
        bare = self.chat.without_reasoning(message)
        answers = [m for m in following if m["role"] == "tool"]
        if answers and not bare.get("tool_calls"):
            # tool results answer calls (gpt-oss's template refuses them otherwise): those of a reply that could not
            # be read are answered as calls too, with the error
            bare["tool_calls"] = [{"id": m.get("tool_call_id"), "type": "function",
                                   "function": {"name": m.get("name") or "tool", "arguments": "{}"}} for m in answers]
        if bare.get("tool_calls"):
            bare["content"] = ""
        prompt = self.render([_BASE_USER], tools, generation_prompt=True)
        whole = self.render([_BASE_USER, bare, *following], tools, generation_prompt=bool(following))
        head = self.chat.shared_head(prompt, whole)
        if head < len(self.render([_BASE_USER], tools)):
            raise TemplateError("cannot render the turn on its own with this chat template: adding it re-renders the "
                                "messages before it")
        region = whole[head:]
        for forms in (self.stop_texts.values(), [f for fs in self._stop_forms.values() for f in fs[1:]]):
            ends = [at for at in (region.find(form) for form in forms) if at >= 0]
            if ends:  # the first stop token, else the first stand-in for one (gpt-oss's <|end|> in history)
                return region[min(ends):]
        return ""

    def _glue(self, continuation: str, stop_id: int | None) -> str:
        """The continuation less the stop token the policy generated, which stands where the template writes it
        (or its stand-in, or another stop token: the generated one is kept either way)."""
        if stop_id is None:
            return continuation
        forms = self._stop_forms.get(stop_id, []) + [f for i, fs in self._stop_forms.items() if i != stop_id for f in fs]
        for form in forms:
            if continuation.startswith(form):
                return continuation[len(form):]
        return continuation

    def encode(self, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
        """(token ids, assistant mask) of a finished conversation in the rollout layout: the mask is 1 on
        every assistant turn's generated tokens and its stop token. Messages after the last assistant turn
        are not part of the example."""
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not turns:
            raise TemplateError("the conversation has no assistant turn to train on")
        ids = self.prompt_ids(messages[:turns[0]], tools)
        mask = [0] * len(ids)
        for position, index in enumerate(turns):
            message = messages[index]
            following = messages[index + 1:turns[position + 1]] if position + 1 < len(turns) else []
            stop_id = self.turn_stop_id(message, tools, following)
            generated = self.encode_text(self.assistant_text(message, tools, messages[:index])) + [stop_id]
            glue = (self.observation_ids(message, following, tools, stop_id) if following
                    else self.closing_ids(message, tools, stop_id)[0])
            ids += generated + glue
            mask += [1] * len(generated) + [0] * len(glue)
        return ids, mask

    # -- reading replies ----------------------------------------------------------------------------
    def parse(self, text: str, *, prompt_ids: list[int] | None = None, tools: list[dict] | None = None,
              stop_id: int | None = None, stopped: bool = True) -> Reply:
        """A generated turn read back (`text` without its stop token; `prompt_ids` the prompt it continued;
        `stop_id` the stop token it ended with). A turn that hands over to the tools (gpt-oss's `<|call|>`) with
        no call that can be read is a malformed call: the tools answer it with the reason."""
        prefix = self.tokenizer.decode((prompt_ids or [])[-_PREFIX_TOKENS:]) if self.style == "template" else ""
        reply = self.chat.read(text, prefix, tools, stopped)
        if stop_id in self._hands_to_tools and not reply.calls and not reply.malformed:
            reply.malformed.append(f"the turn ended with {self.stop_texts[stop_id]} (a call) but holds no call "
                                   f"that can be read as {self.reader}: {text[-200:]!r}")
        return reply

    def read_generation(self, ids: list[int], prompt_ids: list[int], stopped: bool, tools: list[dict] | None) -> Reply:
        """`parse` of generated token ids (the last one the stop token when `stopped`)."""
        text = self.tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=False)
        return self.parse(text, prompt_ids=prompt_ids, tools=tools, stop_id=ids[-1] if stopped and ids else None,
                          stopped=stopped)

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


def chat_renderer(tokenizer, config, model=None) -> ChatRenderer:
    """The renderer a trainer config asks for (`chat_format`, `reasoning`, `chat_template_kwargs`,
    `response_template`), its turns ending on the stop tokens of `model`'s generation config too. When the chat
    template renders tools, the tokenizer carries the response template replies are read with, so that the
    checkpoints saved with it are read the same way wherever they are served."""
    generation = getattr(model, "generation_config", None)
    renderer = ChatRenderer(tokenizer, config.chat_format, reasoning=config.reasoning,
                            template_kwargs=config.chat_template_kwargs,
                            response_template=getattr(config, "response_template", None),
                            generation_eos=getattr(generation, "eos_token_id", None))
    if renderer.style == "template":
        tokenizer.response_template = renderer.chat.response_template
    return renderer
