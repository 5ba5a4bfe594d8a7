"""Real chat templates of model families (shipped in the `trl` wheel) on tiny tokenizers trained on the
fly with each family's special tokens: a faithful CPU stand-in for the real tokenizers, which cannot be
downloaded here. SmolLM2 uses its real tokenizer (the embedded model's)."""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                 "<tool_response>", "</tool_response>"]
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                  "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"]
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]


@dataclass(frozen=True)
class Family:
    name: str
    template: str                 # file in trl/chat_templates ("" for SmolLM2's own)
    specials: tuple[str, ...] = ()
    eos: str = ""
    bos: str | None = None
    pad: str | None = None
    # The template of the same family that renders a finished conversation in the rollout layout (every
    # turn as it was generated), when the original rewrites history: TRL's prefix-preserving variant.
    layout_template: str | None = None

    @property
    def thinks(self) -> bool:
        return self.name == "qwen3"


FAMILIES = {
    "qwen3": Family("qwen3", "qwen3.jinja", tuple(QWEN_SPECIALS), "<|im_end|>", pad="<|endoftext|>",
                    layout_template="qwen3_training.jinja"),
    "qwen3_instruct_2507": Family("qwen3_instruct_2507", "qwen3_instruct_2507.jinja", tuple(QWEN_SPECIALS),
                                  "<|im_end|>", pad="<|endoftext|>"),
    "qwen2_5": Family("qwen2_5", "qwen2_5.jinja", tuple(QWEN_SPECIALS), "<|im_end|>", pad="<|endoftext|>"),
    "llama3_1": Family("llama3_1", "llama3_1.jinja", tuple(LLAMA_SPECIALS), "<|eot_id|>", "<|begin_of_text|>",
                       "<|finetune_right_pad_id|>"),
    "llama3_2": Family("llama3_2", "llama3_2.jinja", tuple(LLAMA_SPECIALS), "<|eot_id|>", "<|begin_of_text|>",
                       "<|finetune_right_pad_id|>"),
    "gemma3": Family("gemma3", "gemma3.jinja", tuple(GEMMA_SPECIALS), "<end_of_turn>", "<bos>", "<pad>"),
    "smollm2": Family("smollm2", ""),
}

CORPUS = [
    "What is the capital of Norway? The capital of Norway is Oslo. About 709,000 people live there.",
    '{"name": "get_capital", "arguments": {"country": "Norway"}} {"capital": "Oslo"} {"population": "709,000"}',
    "You are a helpful assistant. Environment: ipython. Cutting Knowledge Date: December 2023. Today Date:",
    "Let me look that up. I need the population first. Error: unknown city. Thanks, that is all I needed.",
    "# Tools You may call one or more functions to assist with the user query. function signatures XML tags",
]


def template_text(name: str) -> str:
    return (importlib.resources.files("trl") / "chat_templates" / name).read_text()


@functools.cache
def tokenizer_for(family_name: str, layout: bool = False):
    """The family's tokenizer with its real chat template (`layout`: its rollout-layout variant)."""
    family = FAMILIES[family_name]
    if not family.template:
        from grpo_support import load_tokenizer

        return load_tokenizer()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(family.specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(CORPUS * 4, trainer)
    template = template_text(family.layout_template if layout and family.layout_template else family.template)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=family.eos, bos_token=family.bos,
                                   pad_token=family.pad or family.eos, chat_template=template)


def save_tiny_family_model(directory, family_name: str):
    """A random-init tiny Qwen3-architecture model with the family's tokenizer and real template, on disk."""
    from grpo_support import tiny_model

    tokenizer = tokenizer_for(family_name)
    model = tiny_model("qwen", vocab_size=len(tokenizer), seed_eos=tokenizer.eos_token_id)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
