"""Schema-guided decoding for the embedded model, as vLLM does with guided decoding: tool calls for
`tool_choice="required"` or a named tool, and JSON values for `response_format` with a JSON schema.

A 135M model rarely writes a well-formed call on its own. When the request obliges a call we
build it in steps, each conditioned on the prompt and what was chosen so far:

1. the tool name: the likeliest of the offered names (or sampled by likelihood when temperature > 0),
   unless the request names one;
2. each required argument, in schema order: enums and booleans by likelihood; strings generated
   up to the closing quote; numbers generated and parsed; arrays/objects left empty.

The result is rendered in the Hermes format, so the reply parses like any other.

`guided_json` writes a whole JSON value the same way, walking the schema: objects by their
required properties (all properties when none are required), arrays item by item (after
`minItems`, the model chooses between "," and "]"), scalars as above. The value always matches the
schema's shape; its content is only as good as the model.
"""

from __future__ import annotations

import json

from astra_core.chat_format import TOOL_CALL_OPEN, render_tool_call


def _continuation_logprobs(model, prompt_ids: list[int], options: list[list[int]]) -> list[float]:
    """Summed log-probability of each option's tokens after the prompt (one batched forward)."""
    import torch

    width = max(len(o) for o in options)
    rows = [prompt_ids + o + [0] * (width - len(o)) for o in options]
    with torch.inference_mode():
        logits = model(torch.tensor(rows)).logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)
    scores = []
    start = len(prompt_ids)
    for row, option in enumerate(options):
        positions = torch.arange(start - 1, start - 1 + len(option))
        scores.append(float(logprobs[row, positions, torch.tensor(option)].sum()))
    return scores


def _choose(model, tokenizer, prompt_ids: list[int], options: list[str], suffix: str, temperature: float) -> str:
    import torch

    encoded = [tokenizer.encode(o + suffix, add_special_tokens=False) for o in options]
    totals = _continuation_logprobs(model, prompt_ids, encoded)
    scores = torch.tensor([total / len(tokens) for total, tokens in zip(totals, encoded, strict=True)])
    if temperature <= 0:
        return options[int(scores.argmax())]
    probs = torch.softmax(scores / temperature, dim=0)
    return options[int(torch.multinomial(probs, 1))]


def _stop_when_text_has(tokenizer, start: int, stops: tuple[str, ...]):
    """A stopping criterion that decodes only the new tokens (transformers' stop_strings re-indexes the vocab per call)."""
    from transformers import StoppingCriteria

    class StopOnText(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            text = tokenizer.decode(input_ids[0, start:], skip_special_tokens=True)
            return any(s in text for s in stops)

    return StopOnText()


def _generate_until(model, tokenizer, prompt_ids: list[int], stops: tuple[str, ...], max_new_tokens: int,
                    temperature: float, pad_id: int) -> str:
    import torch
    from transformers import StoppingCriteriaList

    kwargs = {"do_sample": temperature > 0}
    if temperature > 0:
        kwargs["temperature"] = temperature
    criteria = StoppingCriteriaList([_stop_when_text_has(tokenizer, len(prompt_ids), stops)])
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, pad_token_id=pad_id,
                             stopping_criteria=criteria, **kwargs)
    text = tokenizer.decode(out[0, len(prompt_ids):], skip_special_tokens=True)
    cut = min((text.index(s) for s in stops if s in text), default=len(text))
    return text[:cut]


def _value(model, tokenizer, prefix: str, schema: dict, temperature: float, pad_id: int):
    prompt_ids = tokenizer.encode(prefix, add_special_tokens=False)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if "enum" in schema and schema["enum"]:
        options = [json.dumps(v, ensure_ascii=False) for v in schema["enum"]]
        return json.loads(_choose(model, tokenizer, prompt_ids, options, "", temperature))
    if kind == "boolean":
        return _choose(model, tokenizer, prompt_ids, ["true", "false"], "", temperature) == "true"
    if kind in ("integer", "number"):
        text = _generate_until(model, tokenizer, prompt_ids, (",", "}", "\n"), 8, temperature, pad_id).strip()
        try:
            number = float(text)
        except ValueError:
            return 0
        return int(number) if kind == "integer" else number
    if kind == "array":
        return []
    if kind == "object":
        return {}
    text = _generate_until(model, tokenizer, tokenizer.encode(prefix + '"', add_special_tokens=False),
                           ('"', "\n"), 24, temperature, pad_id)
    return text.strip()


def guided_tool_call(model, tokenizer, prompt_text: str, tools: list[dict], *, name: str | None = None,
                     temperature: float = 0.0) -> str:
    """A reply holding exactly one well-formed call to one of `tools` (or to `name`)."""
    pad_id = tokenizer.pad_token_id
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    head = prompt_text + TOOL_CALL_OPEN + '\n{"name": "'
    if name is None:
        name = _choose(model, tokenizer, tokenizer.encode(head, add_special_tokens=False), list(by_name), '"',
                       temperature)
    schema = by_name[name].get("parameters") or {}
    properties = schema.get("properties") or {}
    required = [p for p in schema.get("required") or [] if p in properties]
    arguments: dict = {}
    for param in required:
        partial = json.dumps(arguments, ensure_ascii=False)[:-1]
        sep = ", " if arguments else ""
        prefix = f'{head}{name}", "arguments": {partial}{sep}"{param}": '
        arguments[param] = _value(model, tokenizer, prefix, properties[param], temperature, pad_id)
    return render_tool_call(name, arguments)


class _JsonWriter:
    """Writes one JSON value for a schema, each piece conditioned on the prompt and the JSON so far."""

    MAX_ITEMS = 4
    MAX_STRING_TOKENS = 48

    def __init__(self, model, tokenizer, prompt_text: str, temperature: float, max_tokens: int):
        self.model, self.tokenizer = model, tokenizer
        self.prompt_text = prompt_text
        self.temperature = temperature
        self.budget = max_tokens  # generated tokens left; strings shrink to "" when it runs out
        self.text = ""

    def _ids(self, extra: str = "") -> list[int]:
        return self.tokenizer.encode(self.prompt_text + self.text + extra, add_special_tokens=False)

    def _choose(self, options: list[str]) -> str:
        return _choose(self.model, self.tokenizer, self._ids(), options, "", self.temperature)

    def _generate(self, stops: tuple[str, ...], limit: int, extra: str = "") -> str:
        limit = min(limit, self.budget)
        if limit <= 0:
            return ""
        text = _generate_until(self.model, self.tokenizer, self._ids(extra), stops, limit, self.temperature,
                               self.tokenizer.pad_token_id)
        self.budget -= max(1, len(self.tokenizer.encode(text, add_special_tokens=False)))
        return text

    def write(self, schema: dict) -> None:
        schema = _resolve(schema)
        kind = _kind(schema)
        if "const" in schema:
            self.text += json.dumps(schema["const"], ensure_ascii=False)
        elif schema.get("enum"):
            self.text += self._choose([json.dumps(v, ensure_ascii=False) for v in schema["enum"]])
        elif kind == "boolean":
            self.text += self._choose(["true", "false"])
        elif kind == "null":
            self.text += "null"
        elif kind in ("integer", "number"):
            self.text += json.dumps(self._number(schema, kind))
        elif kind == "array":
            self._array(schema)
        elif kind == "object":
            self._object(schema)
        else:
            raw = self._generate(('"', "\n"), self.MAX_STRING_TOKENS, extra='"').strip()
            self.text += json.dumps(raw[: schema.get("maxLength", len(raw))], ensure_ascii=False)

    def _number(self, schema: dict, kind: str) -> float | int:
        try:
            number = float(self._generate((",", "}", "]", "\n"), 8).strip())
        except ValueError:
            number = 0.0
        if "minimum" in schema:
            number = max(number, schema["minimum"])
        if "maximum" in schema:
            number = min(number, schema["maximum"])
        return int(number) if kind == "integer" else number

    def _array(self, schema: dict) -> None:
        items = schema.get("items") or {"type": "string"}
        least = schema.get("minItems", 1)
        most = max(least, min(schema.get("maxItems", self.MAX_ITEMS), self.MAX_ITEMS))
        self.text += "["
        for count in range(most):
            if count >= least and (self.budget <= 0 or self._choose([", ", "]"]) == "]"):
                break
            self.text += ", " if count else ""
            self.write(items)
        self.text += "]"

    def _object(self, schema: dict) -> None:
        properties = schema.get("properties") or {}
        required = [k for k in schema.get("required") or [] if k in properties]
        self.text += "{"
        for index, key in enumerate(required or list(properties)):
            self.text += (", " if index else "") + json.dumps(key) + ": "
            self.write(properties[key])
        self.text += "}"


def _resolve(schema: dict) -> dict:
    """The first non-null alternative of anyOf/oneOf (enough for the schemas our stages send)."""
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [s for s in schema[key] if _kind(s) != "null"] or schema[key]
            return _resolve({**{k: v for k, v in schema.items() if k != key}, **options[0]})
    return schema


def _kind(schema: dict) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in schema:
        return "object"
    return kind


def guided_json(model, tokenizer, prompt_text: str, schema: dict, *, temperature: float = 0.0,
                max_tokens: int = 512) -> str:
    """A JSON value shaped by `schema`, written by the model piece by piece (see the module docstring)."""
    writer = _JsonWriter(model, tokenizer, prompt_text, temperature, max_tokens)
    writer.write(schema)
    return writer.text
