"""Schema-guided decoding for the embedded model, as vLLM does with guided decoding: tool calls for
`tool_choice="required"` or a named tool, and JSON values for `response_format` with a JSON schema.

A 135M model rarely writes a well-formed call or JSON value on its own, so we write it in pieces,
each conditioned on the prompt and on what was written so far, walking the schema:

- a tool name, an enum value or a boolean: the likeliest option (sampled by likelihood when
  temperature > 0); the tool name unless the request names one;
- strings: generated up to the closing quote; numbers: generated, parsed and clamped to the
  schema's bounds;
- objects: their required properties (all properties when none are required; for tool arguments,
  the required ones only); arrays: item by item, and after `minItems` the model chooses between
  "," and "]";
- anyOf/oneOf of objects told apart by a `const` first property (a tagged union, e.g. one
  alternative per tool, `{"name": {"const": "cancel_order"}, "arguments": {...}}`): the likeliest tag,
  then the rest of that alternative; other unions: the first non-null alternative;
- `$ref`s to the root schema's `$defs`/`definitions` are followed.

The value always has the schema's shape; its content is only as good as the model. A tool call is
rendered in the Hermes format, so the reply parses like any other.

The prompt is read once and every piece continues from the cached keys/values of the prompt and of
what was written before it: a piece costs its own tokens, not the prompt's or the written text's again;
the options of a choice are scored in one batch; only the last position's logits of a read are ever
materialised (a tool prompt of a few thousand tokens times a 49k vocabulary would otherwise take gigabytes).
"""

from __future__ import annotations

import copy
import json

from astra_core.chat_format import TOOL_CALL_OPEN, render_tool_call
from astra_core.local.kv_cache import cache_argument, returned_cache
from astra_core.local.prefix_cache import PrefixCache


def _stop_when_text_has(tokenizer, start: int, stops: tuple[str, ...]):
    """A stopping criterion that decodes only the new tokens (transformers' stop_strings re-indexes the vocab per call)."""
    from transformers import StoppingCriteria

    class StopOnText(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            text = tokenizer.decode(input_ids[0, start:], skip_special_tokens=True)
            return any(s in text for s in stops)

    return StopOnText()


class _Writer:
    """Writes text after a prompt piece by piece; `text` is what has been written so far."""

    MAX_ITEMS = 4
    MAX_STRING_TOKENS = 48
    OPTIONS_PER_FORWARD = 16  # the options of a choice scored in one batch (its logits: rows x tokens x vocabulary)

    def __init__(self, model, tokenizer, prompt_text: str, temperature: float, max_tokens: int, *,
                 only_required: bool = False, prefix_cache: PrefixCache | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.temperature = temperature
        self.budget = max_tokens  # generated tokens left; strings shrink to "" when it runs out
        self.only_required = only_required
        self.defs: dict = {}  # the root schema's $defs, for $ref
        self.text = ""
        self.prompt_ids = tokenizer.encode(prompt_text, add_special_tokens=False)
        self.prompt_cache, self.prompt_next_logits = (prefix_cache or PrefixCache(model, max_tokens=0)).prefill(
            self.prompt_ids)
        # What this reply has read so far (the prompt, then what was written): a piece reads only its new tokens.
        self.read_so_far = PrefixCache(model, max_tokens=1 << 30, max_entries=2)
        self.read_so_far.remember(self.prompt_ids, self.prompt_cache)

    def _written_ids(self, extra: str = "") -> list[int]:
        text = self.text + extra
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []

    # -- the two primitives ----------------------------------------------------------------------
    def _read(self, ids: list[int]):
        """(a KV cache holding `ids`, the logits after them): `ids` extend the prompt; only the tokens not read
        before are read (a cache that cannot be cut back to a shared prefix, e.g. sliding-window attention,
        is read again from the prompt's)."""
        import torch

        if getattr(self.prompt_cache, "is_croppable", False):
            return self.read_so_far.prefill(ids)
        if ids == self.prompt_ids:
            return copy.deepcopy(self.prompt_cache), self.prompt_next_logits
        start = len(self.prompt_ids) if ids[:len(self.prompt_ids)] == self.prompt_ids else 0
        cache = copy.deepcopy(self.prompt_cache) if start else None
        with torch.inference_mode():
            out = self.model(torch.tensor([ids[start:]]), **cache_argument(self.model, cache), use_cache=True,
                             logits_to_keep=1)
        return returned_cache(out), out.logits[0, -1].float()

    def choose(self, options: list[str]) -> str:
        """The likeliest option to write next (by mean token log-probability), or one sampled by it."""
        import torch

        scores = torch.tensor(self.scores(options))
        if self.temperature <= 0:
            return options[int(scores.argmax())]
        return options[int(torch.multinomial(torch.softmax(scores / self.temperature, dim=0), 1))]

    def scores(self, options: list[str]) -> list[float]:
        """Each option's mean token log-probability as the next text after what is written."""
        cache, next_logits = self._read(self.prompt_ids + self._written_ids())
        tokens = [self.tokenizer.encode(option, add_special_tokens=False) for option in options]
        scores = []
        for start in range(0, len(tokens), self.OPTIONS_PER_FORWARD):
            chunk = tokens[start:start + self.OPTIONS_PER_FORWARD]
            last = start + len(chunk) == len(tokens)
            scores += self._chunk_scores(chunk, cache if last else copy.deepcopy(cache), next_logits)
        return scores

    def _chunk_scores(self, tokens: list[list[int]], cache, next_logits) -> list[float]:
        """One forward for several options: each row continues the same cache (repeated per row); a shorter
        option is padded at its end, where none of its real tokens can attend (causal), and the padding's own
        scores are never read."""
        import torch

        width = max(map(len, tokens))
        batch = torch.tensor([ids + [ids[-1]] * (width - len(ids)) for ids in tokens])
        cache.batch_repeat_interleave(len(tokens))
        with torch.inference_mode():
            logits = self.model(batch, **cache_argument(self.model, cache), use_cache=True).logits.float()
        first = next_logits.expand(len(tokens), 1, -1)
        predicted = torch.log_softmax(torch.cat([first, logits[:, :-1]], dim=1), dim=-1)
        return [float(predicted[row, torch.arange(len(ids)), torch.tensor(ids)].sum()) / len(ids)
                for row, ids in enumerate(tokens)]

    def generate(self, stops: tuple[str, ...], limit: int, extra: str = "") -> str:
        """Free text after what is written (+ `extra`), up to the first stop string (not included)."""
        import torch
        from transformers import StoppingCriteriaList

        limit = min(limit, self.budget)
        if limit <= 0:
            return ""
        ids = self.prompt_ids + self._written_ids(extra)
        cache, _ = self._read(ids[:-1])  # generate reads the last token itself
        kwargs = {"do_sample": self.temperature > 0}
        if self.temperature > 0:
            kwargs["temperature"] = self.temperature
        criteria = StoppingCriteriaList([_stop_when_text_has(self.tokenizer, len(ids), stops)])
        with torch.inference_mode():
            out = self.model.generate(torch.tensor([ids]), max_new_tokens=limit, stopping_criteria=criteria,
                                      **cache_argument(self.model, cache),  # generate extends it
                                      pad_token_id=self.tokenizer.pad_token_id, **kwargs)
        new = out[0, len(ids):]
        self.budget -= max(1, len(new))
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return text[:min((text.index(s) for s in stops if s in text), default=len(text))]

    # -- JSON by schema ----------------------------------------------------------------------------
    def write(self, schema: dict) -> None:
        schema = self._deref(schema)
        tagged = _tagged_union(schema)
        if tagged is not None:
            self._tagged(*tagged)
            return
        schema = self._deref(_resolve(schema))
        kind = _kind(schema)
        if "const" in schema:
            self.text += json.dumps(schema["const"], ensure_ascii=False)
        elif schema.get("enum"):
            self.text += self.choose([json.dumps(v, ensure_ascii=False) for v in schema["enum"]])
        elif kind == "boolean":
            self.text += self.choose(["true", "false"])
        elif kind == "null":
            self.text += "null"
        elif kind in ("integer", "number"):
            self.text += json.dumps(self._number(schema, kind))
        elif kind == "array":
            self._array(schema)
        elif kind == "object":
            self._object(schema)
        else:
            raw = self.generate(('"', "\n"), self.MAX_STRING_TOKENS, extra='"').strip()
            self.text += json.dumps(raw[: schema.get("maxLength", len(raw))], ensure_ascii=False)

    def _number(self, schema: dict, kind: str) -> float | int:
        try:
            number = float(self.generate((",", "}", "]", "\n"), 8).strip())
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
            if count >= least and (self.budget <= 0 or self.choose([", ", "]"]) == "]"):
                break
            self.text += ", " if count else ""
            self.write(items)
        self.text += "]"

    def _object(self, schema: dict, written: tuple[str, ...] = ()) -> None:
        """The object's keys (after the `written` ones, already in `text` with the opening brace)."""
        properties = schema.get("properties") or {}
        required = [k for k in schema.get("required") or [] if k in properties]
        keys = required if required or self.only_required else list(properties)
        if not written:
            self.text += "{"
        for index, key in enumerate(k for k in keys if k not in written):
            self.text += (", " if index or written else "") + json.dumps(key) + ": "
            self.write(properties[key])
        self.text += "}"

    def _tagged(self, options: list[dict], tag: str) -> None:
        """A tagged union: `{"<tag>": ` then the likeliest tag value picks the alternative written."""
        values = [json.dumps(option["properties"][tag]["const"], ensure_ascii=False) for option in options]
        self.text += "{" + json.dumps(tag) + ": "
        chosen = self.choose(values)
        self.text += chosen
        self._object(options[values.index(chosen)], written=(tag,))

    def _deref(self, schema: dict) -> dict:
        while isinstance(schema.get("$ref"), str):
            name = schema["$ref"].rsplit("/", 1)[-1]
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**self.defs.get(name, {"type": "string"}), **rest}
        return schema


def _resolve(schema: dict) -> dict:
    """The first non-null alternative of anyOf/oneOf (enough for the schemas our stages send)."""
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [s for s in schema[key] if _kind(s) != "null"] or schema[key]
            return _resolve({**{k: v for k, v in schema.items() if k != key}, **options[0]})
    return schema


def _tagged_union(schema: dict) -> tuple[list[dict], str] | None:
    """(alternatives, tag) when `schema` is an anyOf/oneOf of 2+ objects whose first required property
    is the same `const`-valued tag (one distinct value each), else None."""
    options = schema.get("anyOf") or schema.get("oneOf") or []
    if len(options) < 2 or not all(_kind(o) == "object" and o.get("required") for o in options):
        return None
    tag = options[0]["required"][0]
    consts = [((o.get("properties") or {}).get(tag) or {}).get("const", ...) for o in options]
    if any(o["required"][0] != tag for o in options) or ... in consts or len(set(map(json.dumps, consts))) < len(consts):
        return None
    return options, tag


def _kind(schema: dict) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in schema:
        return "object"
    return kind


def guided_json(model, tokenizer, prompt_text: str, schema: dict, *, temperature: float = 0.0,
                max_tokens: int = 512, prefix_cache: PrefixCache | None = None) -> str:
    """A JSON value shaped by `schema`, written by the model piece by piece (see the module docstring)."""
    writer = _Writer(model, tokenizer, prompt_text, temperature, max_tokens, prefix_cache=prefix_cache)
    writer.defs = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    writer.write(schema)
    return writer.text


def guided_tool_call(model, tokenizer, prompt_text: str, tools: list[dict], *, name: str | None = None,
                     temperature: float = 0.0, max_tokens: int = 256, prefix_cache: PrefixCache | None = None) -> str:
    """A reply holding exactly one well-formed call to one of `tools` (or to `name`)."""
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    writer = _Writer(model, tokenizer, prompt_text, temperature, max_tokens, only_required=True,
                     prefix_cache=prefix_cache)
    writer.text = TOOL_CALL_OPEN + '\n{"name": "'
    if name is None:
        name = writer.choose([n + '"' for n in by_name])[:-1]
    writer.text += name + '", "arguments": '
    start = len(writer.text)
    schema = by_name[name].get("parameters") or {}
    writer.defs = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    writer.write({"type": "object", "properties": schema.get("properties") or {},
                  "required": schema.get("required") or []})
    return render_tool_call(name, json.loads(writer.text[start:]))
