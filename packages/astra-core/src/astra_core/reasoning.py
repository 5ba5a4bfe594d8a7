"""Reasoning in model text: what a reply says once its <think> blocks are taken out.

A reasoning model's reply holds its reasoning in `<think>...</think>` when the endpoint does not
split it off into `reasoning_content` (vLLM without --reasoning-parser). Templates such as
DeepSeek-R1's and QwQ's put the opening `<think>` in the generation prompt, so the reply starts
inside the block and only its `</think>` shows.
"""

from __future__ import annotations

import re

_OPENED_BEFORE_THE_REPLY = re.compile(r"^(?:(?!<think>).)*?</think>", re.DOTALL)
_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)  # an unclosed block runs to the end


def without_reasoning(text: str) -> str:
    """`text` without its reasoning: a leading part that ends in `</think>` with no `<think>` before it, and every
    `<think>...</think>` block."""
    return _BLOCK.sub("", _OPENED_BEFORE_THE_REPLY.sub("", text, count=1)).strip()
