"""Prompt KV caches kept between requests, as vLLM's automatic prefix caching does: a request whose
prompt extends an earlier one (the next turn of a conversation, an agent's next tool-loop step, the
user simulator's next message) reads only its new tokens. On CPU, reading the prompt is most of a
short reply's cost: a 5k-token tau2 prompt takes seconds per turn.

Entries are the KV caches of whole prompts, most recently used first, bounded by a token budget.
A lookup reuses the longest common token prefix with any entry (a copy, cropped to it).
"""

from __future__ import annotations

import copy
from collections import OrderedDict

from astra_core.local.kv_cache import cache_argument, returned_cache


class PrefixCache:
    """Owned by the generation worker (one thread): no locking."""

    def __init__(self, model, *, max_tokens: int = 16384, max_entries: int = 16):
        self.model = model
        self.max_tokens = max_tokens
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[int, ...], object] = OrderedDict()
        self.hits = self.reused_tokens = self.read_tokens = 0

    def prefill(self, ids: list[int]):
        """(a KV cache holding `ids`, the logits after its last token); the cache is the caller's to extend."""
        import torch

        reused, cache = self._longest_prefix(ids)
        with torch.inference_mode():
            out = self.model(torch.tensor([ids[reused:]]), **cache_argument(self.model, cache), use_cache=True,
                             logits_to_keep=1)
        self.read_tokens += len(ids) - reused
        extended = returned_cache(out)
        self.remember(ids, extended)
        return copy.deepcopy(extended), out.logits[0, -1].float()

    def _longest_prefix(self, ids: list[int]):
        """(tokens reused, a cache of them or None). At least the last token is always read, for its logits."""
        from transformers import DynamicCache

        best_key, best = None, 0
        for key in self._entries:
            shared = _common_prefix(key, ids, limit=len(ids) - 1)
            if shared > best:
                best_key, best = key, shared
        if best_key is None:
            return 0, DynamicCache(config=self.model.config)
        self._entries.move_to_end(best_key, last=False)
        cache = copy.deepcopy(self._entries[best_key])
        cache.crop(best - cache.get_seq_length())  # a negative count removes that many (any other form is refused)
        self.hits += 1
        self.reused_tokens += best
        return best, cache

    def remember(self, ids: list[int], cache) -> None:
        """Keep `cache` (holding `ids`; the cache's own, not a copy) for later prompts that extend it."""
        if not getattr(cache, "is_croppable", False) or len(ids) > self.max_tokens:
            return  # sliding-window or recurrent caches cannot be cut back to a shared prefix
        key = tuple(ids)
        self._entries[key] = cache
        self._entries.move_to_end(key, last=False)
        while len(self._entries) > self.max_entries or sum(map(len, self._entries)) > self.max_tokens:
            self._entries.popitem(last=True)


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    if n <= 0 or a[0] != b[0]:
        return 0
    if list(a[:n]) == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low] holds; a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if list(a[low:middle]) == b[low:middle]:
            low = middle
        else:
            high = middle
    return low
