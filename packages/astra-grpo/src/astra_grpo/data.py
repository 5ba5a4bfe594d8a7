"""Training data: `trajectory` records for SFT, `rl_sample` records for GRPO.

Everything is read and checked before training starts: a malformed record stops the run with
its file, line, id and field (or, with `skip_bad`, goes to the rejects file with that reason).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from astra_core.jsonl import dumps, load_checked
from astra_core.schema import RecordError

from astra_grpo.environments import kind_of

REWARD_KINDS_NEEDING_JOB = ("f1", "recall", "precision")


def check_rl_sample(record: dict, reward_override: str = "sample") -> None:
    """What an episode needs beyond the schema; raises RecordError naming the field."""
    rid = record.get("id")

    def bad(field: str, message: str) -> RecordError:
        return RecordError(message, record_id=rid, field=field)

    messages = record["messages"]
    if not any(m["role"] == "user" for m in messages):
        raise bad("messages", "the prompt needs a user message")
    if messages[-1]["role"] == "assistant":
        raise bad(f"messages[{len(messages) - 1}]", "the prompt must not end with an assistant turn")
    environment = record["environment"]
    kind_of(record).check(record)  # what its environment kind needs (astra_grpo.environments)
    for index, tool in enumerate(record["tools"]):
        if not isinstance(tool["function"].get("name"), str):
            raise bad(f"tools[{index}].function.name", "every tool needs a name")
    kind = record["reward"]["kind"] if reward_override == "sample" else reward_override
    if kind in REWARD_KINDS_NEEDING_JOB and not record.get("job"):
        raise bad("job", f"the {kind} reward needs a non-empty job (sub-Q-A pairs)")
    if kind == "state" and not isinstance(record["reward"].get("expected_state"), dict):
        raise bad("reward.expected_state", "the state reward needs an expected_state object")
    if (kind == "tau2") != ("tau2" in environment):
        raise bad("reward.kind", "the tau2 reward is for tau2 environments (environment.tau2), and only it scores them")
    if kind == "openenv" and "openenv" not in environment:
        raise bad("reward.kind", "the openenv reward is an OpenEnv environment's own (environment.openenv)")
    if kind == "state" and "openenv" in environment:
        raise bad("reward.kind", "the state reward reads the environment's state, which an OpenEnv server does not "
                                 "give: use its own reward (openenv) or F1 over the job")


def check_trajectory(record: dict) -> None:
    if not any(m["role"] == "assistant" for m in record["messages"]):
        raise RecordError("a trajectory needs at least one assistant turn to learn from",
                          record_id=record.get("id"), field="messages")


CHECKS = {"rl_sample": check_rl_sample, "trajectory": check_trajectory}


def load_records(paths: Iterable[str], kind: str, *, skip_bad: bool = False, rejects: str | None = None,
                 check=None) -> list[dict]:
    """All records of `paths` as `kind`, schema- and content-checked (`check`, default the kind's own)."""
    return load_checked(paths, kind, stage=f"astra-grpo load {kind}", check=check or CHECKS.get(kind),
                        skip_bad=skip_bad, rejects=rejects)


def write_rejects(path: str | None, stage: str, dropped: list[tuple[dict, str]]) -> None:
    """Append records dropped after loading (e.g. over-long prompts) to the rejects file."""
    if not path or not dropped:
        return
    with open(path, "ab") as handle:
        for record, reason in dropped:
            handle.write(dumps({"id": record.get("id"), "reason": reason, "stage": stage, "record": record}))


@dataclass
class SampleStream:
    """An endless, seeded, epoch-by-epoch shuffled stream of indices; its position is checkpointed."""

    size: int
    seed: int
    epoch: int = 0
    offset: int = 0

    def _order(self, epoch: int) -> list[int]:
        order = list(range(self.size))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, count: int) -> list[int]:
        out: list[int] = []
        while len(out) < count:
            order = self._order(self.epoch)
            chunk = order[self.offset:self.offset + count - len(out)]
            out.extend(chunk)
            self.offset += len(chunk)
            if self.offset >= self.size:
                self.epoch, self.offset = self.epoch + 1, 0
        return out

    def state_dict(self) -> dict:
        return {"size": self.size, "seed": self.seed, "epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict) -> None:
        if state["size"] != self.size:
            raise ValueError(f"resuming with {self.size} samples, but the checkpoint was trained on {state['size']}")
        self.seed, self.epoch, self.offset = state["seed"], state["epoch"], state["offset"]
