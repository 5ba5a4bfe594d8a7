"""Real chat templates of model families, shipped in the `trl` wheel, on tiny tokenizers trained on the fly
(astra-core's tests/tiny_tokenizers.py): a faithful CPU stand-in for the real tokenizers.

The families are DISCOVERED: every template in `trl/chat_templates` (training variants aside) that renders a
whole tool-calling exchange by TRL's own test (`supports_tool_calling`), so a template a newer trl ships is in
the matrix without anyone adding it. Each tiny tokenizer carries the special tokens read off its template. Two
families that know no tools are kept for the Hermes path: Gemma 3 (its template) and SmolLM2 (the embedded
model's real tokenizer)."""

from __future__ import annotations

import functools

from tiny_tokenizers import template_text, templates_dir, tiny_tokenizer, with_template

__all__ = ["COVERED", "HERMES_FAMILIES", "LAYOUT_BUGS", "families", "save_tiny_family_model", "template_text", "tokenizer_for",
           "tool_capable_templates", "training_template", "with_template"]

HERMES_FAMILIES = ("gemma3", "smollm2")  # templates without tools: the Hermes format, as astra-core serves
COVERED: dict[str, str] = {}  # family -> how the matrix read its replies this run (conftest.py prints the count)

# Templates whose own render contradicts their generation prompt, so that no rollout can equal it: the matrix plays
# and reads their episodes; the comparisons named (render: with the template's render of the conversation; sft: SFT
# with the rollout; trl_masks: SFT masks with TRL's training template) do not apply. By exact name: a new template
# never gets this. docs/model-families.md prints the reasons.
LAYOUT_BUGS = {
    "diffusion_gemma": (("render", "sft", "trl_masks"),
                        "its render of a model turn after tool results opens the turn twice where its generation "
                        "prompt opens none, so the policy writes the header itself; TRL's training template leaves "
                        "the `<|tool_response>` that ends a turn of calls out of its blocks; a diffusion model "
                        "besides, not sampled token by token"),
    "deepseekv3": (("render", "trl_masks"),
                   "it renders a second round of calls without its opening tokens, its prose and its reasoning, and "
                   "drops the `<think>` block its generation prompt opens (as TRL's training template does, whose "
                   "blocks train turns without the `</think>` that closes it)"),
}


@functools.cache
def tool_capable_templates() -> tuple[str, ...]:
    """Every template of the installed trl that renders a call's name and arguments and the tool's result."""
    from trl.chat_template_utils import supports_tool_calling

    names = sorted(p.name for p in templates_dir().iterdir()
                   if p.name.endswith(".jinja") and not p.name.endswith("_training.jinja"))
    return tuple(n.removesuffix(".jinja") for n in names if supports_tool_calling(tiny_tokenizer(template_text(n))))


def coverage(covered: dict[str, str]) -> dict:
    """What this process's matrix covered, for `coverage_line` (computed here: a pytest-xdist controller has no trl
    templates discovered)."""
    return {"covered": dict(covered), "ships": len(tool_capable_templates()) if covered else 0}


def coverage_line(parts: list[dict]) -> str | None:
    """The run's summary line from the `coverage` of each process that ran part of the matrix (conftest.py)."""
    covered = {family: reader for part in parts for family, reader in part["covered"].items()}
    if not covered:
        return None
    from importlib.metadata import version

    readers = sorted(set(covered.values()))
    tool_capable = [f for f in covered if f not in HERMES_FAMILIES]
    ships = max(part["ships"] for part in parts)
    return (f"template matrix: {len(covered)} chat templates covered ({len(tool_capable)} tool-capable ones of trl "
            f"{version('trl')}, which ships {ships}; replies read as {', '.join(readers)})")


def families() -> list[str]:
    return [*tool_capable_templates(), *HERMES_FAMILIES]


@functools.cache
def tokenizer_for(family: str):
    """The family's tokenizer with its real chat template (treat as read-only: it is shared)."""
    if family == "smollm2":
        from grpo_support import load_tokenizer

        return load_tokenizer()
    return tiny_tokenizer(template_text(f"{family}.jinja"))


def training_template(family: str) -> str | None:
    """TRL's training variant of the family's template (prefix-preserving, `{% generation %}` blocks), if any."""
    if family == "smollm2":
        return None
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    tokenizer = tokenizer_for(family)
    try:
        patched = get_training_chat_template(tokenizer)
    except ValueError:
        return None  # TRL has none for this template
    template = patched or tokenizer.chat_template
    return template if has_generation_markers(template) else None


def save_tiny_family_model(directory, family: str):
    """A random-init tiny Qwen3-architecture model with the family's tokenizer and real template, on disk."""
    from grpo_support import tiny_model

    tokenizer = tokenizer_for(family)
    model = tiny_model("qwen", vocab_size=len(tokenizer), seed_eos=tokenizer.eos_token_id)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
