"""Episode rewards from astra-reward: the F1 trajectory reward (paper Eq. 30-31) and its ablations,
or the state verifier."""

from __future__ import annotations


def reward_kind(sample: dict, override: str = "sample") -> str:
    return sample["reward"]["kind"] if override == "sample" else override


def score_episode(sample: dict, messages: list[dict], malformed_calls: int, override: str = "sample",
                  final_state: dict | None = None) -> tuple[float, dict]:
    """(reward, components) of one finished episode."""
    kind = reward_kind(sample, override)
    if kind == "state":
        from astra_reward import state_reward

        spec = sample["reward"]
        result = state_reward(final_state or {}, spec["expected_state"], ignore_fields=spec.get("ignore_fields") or [])
        return float(result.reward), result.components()
    from astra_reward import f1_reward

    result = f1_reward(sample.get("job") or [], messages, variant=kind, malformed_calls=malformed_calls)
    return float(result.reward), result.components()
