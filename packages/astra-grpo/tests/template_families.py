"""Real chat templates of model families, shipped in the `trl` wheel, on tiny tokenizers trained on the fly: a
faithful CPU stand-in for the real tokenizers, which cannot be downloaded here.

The families are DISCOVERED: every template in `trl/chat_templates` (training variants aside) that renders a
whole tool-calling exchange by TRL's own test (`supports_tool_calling`), so a template a newer trl ships is in
the matrix without anyone adding it. Each tiny tokenizer carries the special tokens read off its template
(`<|...|>`, `<｜...｜>`, Gemma 4's `<|turn>`/`<turn|>`, `<tag>`/`</tag>`), as the family's real tokenizer holds
them as single tokens. Two families that know no tools are kept for the Hermes path: Gemma 3 (its template) and
SmolLM2 (the embedded model's real tokenizer)."""

from __future__ import annotations

import functools
import importlib.resources
import re

# What a special token looks like in the templates TRL ships.
SPECIAL_TOKEN = re.compile(r"<\|[^<>|\s]{1,40}\|>|<｜[^｜]{1,40}｜>|<\|[a-z_\"]{1,30}>|<[a-z_\"]{1,30}\|>|</?[a-z_]{2,30}>")
BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"
HERMES_FAMILIES = ("gemma3", "smollm2")  # templates without tools: the Hermes format, as astra-core serves
COVERED: dict[str, str] = {}  # family -> how the matrix read its replies this run (conftest.py prints the count)

CORPUS = [
    "What is the capital of Norway? The capital of Norway is Oslo. About 709,000 people live there.",
    '{"name": "get_capital", "arguments": {"country": "Norway"}} {"capital": "Oslo"} {"population": "709,000"}',
    "You are a helpful assistant. Environment: ipython. Cutting Knowledge Date: December 2023. Today Date:",
    "Let me look that up. I need the population first. Error: unknown city. Thanks, that is all I needed.",
    "# Tools You may call one or more functions to assist with the user query. function signatures XML tags",
]


def templates_dir():
    return importlib.resources.files("trl") / "chat_templates"


def template_text(name: str) -> str:
    return (templates_dir() / name).read_text()


def special_tokens(template: str) -> list[str]:
    return sorted(set(SPECIAL_TOKEN.findall(template)) | {BOS, EOS, PAD})


def tiny_tokenizer(template: str):
    """A byte-level BPE tokenizer trained in a moment, holding the template's special tokens, with the template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special_tokens(template), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, bos_token=BOS, pad_token=PAD,
                                   chat_template=template)


@functools.cache
def tool_capable_templates() -> tuple[str, ...]:
    """Every template of the installed trl that renders a call's name and arguments and the tool's result."""
    from trl.chat_template_utils import supports_tool_calling

    names = sorted(p.name for p in templates_dir().iterdir()
                   if p.name.endswith(".jinja") and not p.name.endswith("_training.jinja"))
    return tuple(n.removesuffix(".jinja") for n in names if supports_tool_calling(tiny_tokenizer(template_text(n))))


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


def with_template(tokenizer, template: str):
    """A copy of a tiny tokenizer with another chat template (the cached one stays as it is)."""
    return type(tokenizer)(tokenizer_object=tokenizer.backend_tokenizer, eos_token=tokenizer.eos_token,
                           bos_token=tokenizer.bos_token, pad_token=tokenizer.pad_token, chat_template=template)


def save_tiny_family_model(directory, family: str):
    """A random-init tiny Qwen3-architecture model with the family's tokenizer and real template, on disk."""
    from grpo_support import tiny_model

    tokenizer = tokenizer_for(family)
    model = tiny_model("qwen", vocab_size=len(tokenizer), seed_eos=tokenizer.eos_token_id)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
