"""Tiny tokenizers for real chat templates: a byte-level BPE trained in a moment on a few sentences, holding the
special tokens read off the template (`<|...|>`, `<｜...｜>`, Gemma 4's `<|turn>`/`<turn|>`, `<tag>`/`</tag>`),
as the family's real tokenizer holds them as single tokens. A faithful CPU stand-in for real tokenizers, which
cannot be downloaded here. The templates are the real ones that the `trl` wheel ships."""

from __future__ import annotations

import importlib.resources
import re

SPECIAL_TOKEN = re.compile(r"<\|[^<>|\s]{1,40}\|>|<｜[^｜]{1,40}｜>|<\|[a-z_\"]{1,30}>|<[a-z_\"]{1,30}\|>|</?[a-z_]{2,30}>")
BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"
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
    """A byte-level BPE tokenizer holding the template's special tokens, with the template."""
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


def with_template(tokenizer, template: str):
    """A copy of a tiny tokenizer with another chat template (the original stays as it is)."""
    return type(tokenizer)(tokenizer_object=tokenizer.backend_tokenizer, eos_token=tokenizer.eos_token,
                           bos_token=tokenizer.bos_token, pad_token=tokenizer.pad_token, chat_template=template)
