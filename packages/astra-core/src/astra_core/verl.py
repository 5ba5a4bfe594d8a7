"""RL samples in the layout verl's multi-turn tool agent loop reads (`agent_name: tool_agent` rows of a
parquet file), so a user can train on our samples with verl instead of astra-grpo.

One row per `rl_sample`, field by field:

| verl field | from the sample |
|---|---|
| `data_source` | `--data-source` (default `astra`): verl picks the reward function by it |
| `agent_name` | `tool_agent`: verl's ToolAgentLoop plays the episode |
| `prompt` | `messages` (system and user), as chat messages |
| `ability` | `--ability` (default `tool_use`) |
| `reward_model` | `{style: "rule", ground_truth: JSON of {reward, job}}`: what astra-reward scores (F1 over the sub-tasks, or the expected state) |
| `extra_info.split`, `.index` | `--split`, the sample's position in the input |
| `extra_info.sample_id` | `id` |
| `extra_info.need_tools_kwargs`, `.tools_kwargs` | `true`; per tool `{create_kwargs: {sample_id}}`: a verl tool creates its instance for this sample |
| `extra_info.tools` | JSON of `tools` (OpenAI schemas, distractors included): the schemas a verl tool config declares |
| `extra_info.distractors` | names of the mixed-in irrelevant tools |
| `extra_info.environment` | JSON of `environment` (the code a verl tool runs, e.g. through astra-sandbox) |
| `extra_info.interaction_kwargs` | `{user: JSON of the user simulator profile}` for interactive samples (verl's interaction), else absent |

Nested values that differ in shape from sample to sample (schemas, states, code) are JSON strings, so
every row has one parquet schema. Write parquet with `-o FILE.parquet` (needs pyarrow: the `parquet` extra).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from astra_core.config import knob


@dataclass
class VerlConfig:
    data_source: str = knob("astra", "verl's data_source of every row (verl chooses the reward function by it).")
    split: str = knob("train", "extra_info.split of every row.")
    ability: str = knob("tool_use", "verl's ability of every row.")


def verl_row(sample: dict, config: VerlConfig, stage) -> dict:
    """An rl_sample as a verl multi-turn tool-agent row (the table in this module's docs)."""
    extra = {
        "split": config.split,
        "index": stage.counts.read - 1,
        "sample_id": sample["id"],
        "need_tools_kwargs": True,
        "tools_kwargs": {tool["function"]["name"]: {"create_kwargs": {"sample_id": sample["id"]}}
                         for tool in sample["tools"]},
        "tools": json.dumps(sample["tools"], ensure_ascii=False),
        "distractors": list(sample.get("distractors") or []),
        "environment": json.dumps(sample["environment"], ensure_ascii=False),
    }
    if sample.get("user"):
        extra["interaction_kwargs"] = {"user": json.dumps(sample["user"], ensure_ascii=False)}
    truth = {"reward": sample["reward"], "job": sample.get("job") or []}
    return {"id": sample["id"], "data_source": config.data_source, "agent_name": "tool_agent",
            "prompt": [{"role": m["role"], "content": m.get("content") or ""} for m in sample["messages"]],
            "ability": config.ability,
            "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, ensure_ascii=False)},
            "extra_info": extra}
