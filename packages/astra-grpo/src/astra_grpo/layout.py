"""How a micro-batch's sequences are laid out for the policy's forward pass.

Three layouts of the same sequences give the same per-token log-probs:

    padded   one row per sequence, right-padded to the longest; the model's own attention (any model)
    packed   every sequence end to end in one row, no padding: position ids restart at each sequence and
             attention never crosses from one sequence into another
    tree     the sequences folded into a prefix tree (a radix trie on token ids) and laid out in one row,
             depth first: a prefix that several sequences share (a group's prompt) is forwarded once, and
             each later token attends to exactly the tokens before it in its own sequence

Packed is the tree of sequences that share nothing. In packed and tree rows the unit of attention is a
*node*: a contiguous span of the row whose queries see the spans of its ancestors and, causally, its own
span (`Nodes`); the attention functions over it are in `layout_attention`.

The per-sequence views stay dense: `loss_mask` is [B, T] (B sequences, T the longest) and
`logprobs.token_logprobs` returns [B, T] log-probs. A loss token t of sequence b is predicted at one
position of the row (`pair_position`), the position of its token t - 1; in a tree several sequences'
tokens can be predicted at the same shared position (with the same or different targets), so the
gradient of every branch flows into the shared prefix.

Micro-batches are planned here too (`plan`: by a token budget or a count of sequences, equal in number on
every process), and a row is cut into context-parallel slices (`Layout.part`). This module imports only
torch, numpy and the config's names: `logprobs` and `context_parallel` both build on it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from astra_grpo.config import LAYOUTS as KINDS


def trainable_tokens(mask: Sequence[int]) -> int:
    """Tokens of one sequence the loss is taken on (the first token never is: nothing predicts it)."""
    return int(sum(mask[1:]))


# -- nodes: the attention structure of a packed or tree row ----------------------------------------

Span = tuple[int, int]


@dataclass
class Nodes:
    """The attention structure of one packed or tree row of `width` positions.

    `spans[i]` is node i's span of the row (the spans tile the row in order); `keys[i]` are the spans its
    queries attend to: its ancestors' spans, then its own, merged where contiguous. A query at row
    position p of node i sees every key of its ancestors and the keys of node i at positions <= p
    (causal, aligned at the bottom right: the last query sees every key)."""

    spans: list[Span]
    keys: list[list[Span]]
    width: int

    def varlen(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
        """The varlen form (FlashAttention's): (cu_seqlens_q [S+1], kv_index [K], cu_seqlens_k [S+1],
        longest node, longest key path). Node i's keys are rows kv_index[cu_k[i]:cu_k[i+1]] of the row's K/V."""
        lengths = [sum(b - a for a, b in runs) for runs in self.keys]
        index = torch.cat([torch.arange(a, b) for runs in self.keys for a, b in runs])
        return (torch.tensor([0] + [end for _, end in self.spans], dtype=torch.int32, device=device), index.to(device),
                torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=device),
                max(b - a for a, b in self.spans), max(lengths))

    def visibility(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(node of each row position [W], sees [S, S]: node i sees node j's keys), for mask functions
        (FlexAttention): position q sees k iff sees[node[q], node[k]] and k <= q."""
        node_of = torch.empty(self.width, dtype=torch.long)
        for index, (a, b) in enumerate(self.spans):
            node_of[a:b] = index
        sees = torch.zeros(len(self.spans), len(self.spans), dtype=torch.bool)
        for index, runs in enumerate(self.keys):
            for a, b in runs:
                sees[index, node_of[a:b].unique()] = True
        return node_of.to(device), sees.to(device)

    def padded_to(self, width: int) -> Nodes:
        """The same nodes with a node of filler positions [self.width, width) that sees only itself."""
        if width == self.width:
            return self
        return Nodes(self.spans + [(self.width, width)], self.keys + [[(self.width, width)]], width)


# -- the prefix tree --------------------------------------------------------------------------------

class _Node:
    __slots__ = ("children", "tokens")

    def __init__(self, tokens: np.ndarray):
        self.tokens = tokens
        self.children: dict[int, _Node] = {}


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def _insert(root: _Node, sequence: np.ndarray) -> None:
    """Add `sequence` to the trie, splitting nodes so that it ends on a node boundary."""
    node, pos = root, 0
    while pos < len(sequence):
        first = int(sequence[pos])
        child = node.children.get(first)
        if child is None:
            node.children[first] = _Node(sequence[pos:])
            return
        shared = common_prefix(child.tokens, sequence[pos:])
        if shared < len(child.tokens):  # split: the shared head keeps the child's place among its siblings
            head = _Node(child.tokens[:shared])
            child.tokens = child.tokens[shared:]
            head.children[int(child.tokens[0])] = child
            node.children[first] = head
            child = head
        node, pos = child, pos + shared


def _path(root: _Node, sequence: np.ndarray) -> list[_Node]:
    """The nodes whose tokens, in order, are `sequence` (which was inserted)."""
    nodes, node, pos = [], root, 0
    while pos < len(sequence):
        node = node.children[int(sequence[pos])]
        nodes.append(node)
        pos += len(node.tokens)
    return nodes


# -- the layout of one micro-batch ------------------------------------------------------------------

@dataclass
class Layout:
    """One micro-batch laid out for the forward pass.

    Row tensors ([R, W]: R = B rows padded, 1 row packed or tree): `input_ids`, `position_ids`, and for
    padded rows `attention_mask`. `nodes`: the attention structure of a packed or tree row (None when
    padded). Per-sequence views ([B, T]): `loss_mask` (1 where the loss is taken; never on token 0).
    The loss tokens in row-major order of `loss_mask` are the *pairs*: pair m is predicted at flat row
    position `pair_position[m]` (row * W + column) and its target is `pair_target[m]`."""

    kind: str
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    nodes: Nodes | None
    loss_mask: torch.Tensor
    pair_position: torch.Tensor
    pair_target: torch.Tensor
    lengths: list[int]

    @property
    def tokens(self) -> int:
        """Every sequence's own tokens, each counted once per sequence (what a dense update computes)."""
        return sum(self.lengths)

    @property
    def forwarded_tokens(self) -> int:
        """Positions the forward pass computes (padding included for padded rows)."""
        return self.input_ids.numel()

    def to(self, device) -> Layout:
        moved = {name: getattr(self, name).to(device) for name in ("input_ids", "position_ids", "loss_mask",
                                                                 "pair_position", "pair_target")}
        mask = self.attention_mask.to(device) if self.attention_mask is not None else None
        return Layout(self.kind, attention_mask=mask, nodes=self.nodes, lengths=self.lengths, **moved)

    def part(self, cp_size: int = 1, cp_rank: int = 0) -> Part:
        """What one rank of a context-parallel group forwards: its contiguous slice of every row (the width
        padded up to a multiple of `cp_size`) and the pairs predicted inside it. `cp_size` 1: everything."""
        rows, width = self.input_ids.shape
        padded = -(-width // cp_size) * cp_size
        ids, positions = self.input_ids, self.position_ids
        if padded > width:
            extra = padded - width
            ids = torch.nn.functional.pad(ids, (0, extra), value=0)
            if self.nodes is None:  # padded rows: the positions run on (after the tokens: seen by none)
                tail = positions[:, -1:] + torch.arange(1, extra + 1, device=positions.device)
            else:  # a filler node of its own
                tail = torch.arange(extra, device=positions.device).expand(rows, extra)
            positions = torch.cat([positions, tail], dim=1)
        size = padded // cp_size
        columns = slice(cp_rank * size, (cp_rank + 1) * size)
        row, column = self.pair_position // width, self.pair_position % width
        owner = column // size
        mine = torch.nonzero(owner == cp_rank).flatten()
        local = row[mine] * size + column[mine] - cp_rank * size  # flat position in this rank's slice
        predicting = torch.zeros(rows * size, dtype=torch.bool, device=ids.device)
        predicting[local] = True
        rank_of_kept = torch.cumsum(predicting.long(), 0) - 1  # a pair's row among the kept logits
        return Part(input_ids=ids[:, columns], position_ids=positions[:, columns],
                    attention_mask=self.attention_mask if cp_size == 1 else None,
                    nodes=self.nodes.padded_to(padded) if self.nodes is not None else None,
                    predicting=predicting.view(rows, size), pair_row=rank_of_kept[local],
                    pair_target=self.pair_target[mine], pairs=mine,
                    owner_counts=torch.bincount(owner, minlength=cp_size).tolist(), owner=owner)


@dataclass
class Part:
    """This rank's share of a `Layout` (all of it without context parallelism). `predicting` [R, w]: the
    positions whose logits are needed, `pair_row`: each of its pairs' row among those logits (in row-major
    order), `pairs`: which of the layout's pairs they are; `owner` (per pair) and `owner_counts` (per rank)
    say where every pair is computed, for gathering them over the CP group."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    nodes: Nodes | None
    predicting: torch.Tensor
    pair_row: torch.Tensor
    pair_target: torch.Tensor
    pairs: torch.Tensor
    owner_counts: list[int]
    owner: torch.Tensor


def build(sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], kind: str = "tree", pad_id: int = 0,
          keys: Sequence[Hashable] | None = None) -> Layout:
    """The layout of `sequences` (token ids) with their loss masks. `keys` (tree only): sequences share
    prefixes only with sequences of the same key (e.g. their GRPO group); None: any common prefix is shared."""
    if kind not in KINDS:
        raise ValueError(f"layout must be one of {' | '.join(KINDS)}, got {kind!r}")
    if not sequences or any(len(s) == 0 for s in sequences):
        raise ValueError("a layout needs at least one sequence and no empty sequence")
    lengths = [len(s) for s in sequences]
    width = max(lengths)
    loss_mask = torch.zeros((len(sequences), width), dtype=torch.float32)
    for index, mask in enumerate(masks):
        if len(mask) != lengths[index]:
            raise ValueError(f"sequence {index}: {lengths[index]} tokens but a loss mask of {len(mask)}")
        loss_mask[index, :len(mask)] = torch.tensor(list(mask), dtype=torch.float32)
    loss_mask[:, 0] = 0.0  # the first token has no prefix to predict it from
    arrays = [np.asarray(s, dtype=np.int64) for s in sequences]
    if kind == "padded":
        return _padded(arrays, loss_mask, pad_id, lengths)
    if kind == "packed":
        keys = list(range(len(sequences)))
    return _tree(kind, arrays, loss_mask, lengths, keys)


def _padded(arrays: list[np.ndarray], loss_mask: torch.Tensor, pad_id: int, lengths: list[int]) -> Layout:
    rows, width = loss_mask.shape
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    for row, array in enumerate(arrays):
        ids[row, :len(array)] = torch.from_numpy(array)
        attention[row, :len(array)] = 1
    slots = torch.nonzero(loss_mask.flatten() > 0).flatten()  # b * T + t, predicted at b * T + t - 1
    return Layout("padded", ids, torch.arange(width).expand(rows, width).clone(), attention, None, loss_mask,
                  slots - 1, ids.flatten()[slots], lengths)


def _tree(kind: str, arrays: list[np.ndarray], loss_mask: torch.Tensor, lengths: list[int],
          keys: Sequence[Hashable] | None) -> Layout:
    roots: dict[Hashable, _Node] = {}
    keys = [None] * len(arrays) if keys is None else list(keys)
    for key, array in zip(keys, arrays, strict=True):
        _insert(roots.setdefault(key, _Node(array[:0])), array)

    # Depth-first, pre-order: every node after its ancestors; the first child right after its parent.
    start_of: dict[int, int] = {}
    spans, node_keys, tokens, positions = [], [], [], []
    cursor = 0
    stack = [(child, 0, []) for root in reversed(list(roots.values())) for child in reversed(list(root.children.values()))]
    while stack:
        node, depth, ancestors = stack.pop()
        span = (cursor, cursor + len(node.tokens))
        start_of[id(node)] = cursor
        runs = _merge([*ancestors, span])
        spans.append(span)
        node_keys.append(runs)
        tokens.append(node.tokens)
        positions.append(np.arange(depth, depth + len(node.tokens)))
        cursor = span[1]
        stack.extend((child, depth + len(node.tokens), runs) for child in reversed(list(node.children.values())))

    # Row position of every token of every sequence, then the pairs in row-major order of loss_mask.
    where = torch.zeros(loss_mask.shape, dtype=torch.long)
    for index, (key, array) in enumerate(zip(keys, arrays, strict=True)):
        path = _path(roots[key], array)
        where[index, :len(array)] = torch.from_numpy(np.concatenate(
            [np.arange(start_of[id(n)], start_of[id(n)] + len(n.tokens)) for n in path]))
    slots = torch.nonzero(loss_mask > 0)  # [M, 2]: (b, t)
    row = torch.from_numpy(np.concatenate(tokens))[None]
    return Layout(kind, row,
                  torch.from_numpy(np.concatenate(positions))[None], None, Nodes(spans, node_keys, cursor), loss_mask,
                  where[slots[:, 0], slots[:, 1] - 1], row[0, where[slots[:, 0], slots[:, 1]]], lengths)


def _merge(runs: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for a, b in runs:
        if merged and merged[-1][1] == a:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


# -- micro-batch planning ---------------------------------------------------------------------------

@dataclass
class Plan:
    """Micro-batches (lists of sequence indices) over an order of the sequences: every micro-batch is a
    contiguous run of `order`. `shared[k]` is how many leading tokens the sequence at order[k] shares with
    the one before it (tree layouts, same key), so a run's forwarded tokens are known without a trie."""

    order: list[int]
    lengths: list[int]
    shared: list[int]
    kind: str
    cuts: list[int]  # run boundaries in `order`: [0, ..., len(order)]

    @property
    def micro_batches(self) -> list[list[int]]:
        return [self.order[a:b] for a, b in zip(self.cuts[:-1], self.cuts[1:], strict=True)]

    def cost(self, start: int, end: int) -> int:
        """Positions the forward computes for the run order[start:end]."""
        if self.kind == "padded":
            return (end - start) * max(self.lengths[i] for i in self.order[start:end])
        return sum(self.lengths[i] for i in self.order[start:end]) - sum(self.shared[start + 1:end])

    def split_to(self, count: int) -> Plan:
        """The same order in exactly `count` micro-batches (count >= len(micro_batches), <= sequences): the
        costliest run of two or more sequences is cut where its two parts cost most alike, until there are
        `count`. Every process runs the same number of forward passes (DDP / ZeRO collectives)."""
        if not len(self.cuts) - 1 <= count <= len(self.order):
            raise ValueError(f"cannot split {len(self.order)} sequences in {len(self.cuts) - 1} micro-batches "
                             f"into {count}")
        cuts = list(self.cuts)
        while len(cuts) - 1 < count:
            runs = [(self.cost(a, b), a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b - a > 1]
            _, a, b = max(runs)
            cut = min(range(a + 1, b), key=lambda c: max(self.cost(a, c), self.cost(c, b)))
            cuts = sorted([*cuts, cut])
        return Plan(self.order, self.lengths, self.shared, self.kind, cuts)


def plan(sequences: Sequence[list[int]], kind: str, *, budget: int | None, size: int,
         keys: Sequence[Hashable] | None = None) -> Plan:
    """Micro-batches of `sequences` (token lists) for `kind` layouts: with a `budget`, as many sequences as fit in
    that many forwarded positions (a sequence longer than the budget alone), else `size` sequences each.

    Order: padded, longest first (less padding); packed, longest first; tree, by key (first seen first),
    lexicographically within a key, so a run shares what its neighbours share."""
    lengths = [len(s) for s in sequences]
    if kind == "tree":
        keys = [None] * len(sequences) if keys is None else list(keys)
        rank = {key: index for index, key in reversed(list(enumerate(keys)))}
        order = sorted(range(len(sequences)), key=lambda i: (rank[keys[i]], sequences[i]))  # lists: no copies
        shared = [0] + [common_prefix(np.asarray(sequences[a]), np.asarray(sequences[b])) if keys[a] == keys[b] else 0
                        for a, b in zip(order[:-1], order[1:], strict=True)]
    else:
        order = sorted(range(len(sequences)), key=lambda i: -lengths[i])
        shared = [0] * len(order)
    draft = Plan(order, lengths, shared, kind, [0])
    if budget is None:
        cuts = list(range(0, len(order), size)) + [len(order)]
    else:
        cuts = [0]
        for end in range(1, len(order) + 1):
            if end - 1 > cuts[-1] and draft.cost(cuts[-1], end) > budget:
                cuts.append(end - 1)
        cuts.append(len(order))
    return Plan(order, lengths, shared, kind, sorted(set(cuts)) if order else [0])
