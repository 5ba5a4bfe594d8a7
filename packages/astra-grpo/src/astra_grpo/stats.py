"""Summaries of episodes for the per-step log (reward, turns, tool calls, format validity, lengths)."""

from __future__ import annotations

import statistics
from collections import Counter

from astra_grpo.rollout import Episode, Group

FINISH_REASONS = ("no_tool_call", "max_turns", "max_length", "env_timeout", "user_stop", "env_done", "error")


def episode_stats(groups: list[Group], prefix: str) -> dict[str, float]:
    episodes: list[Episode] = [e for g in groups for e in g.episodes]
    if not episodes:
        return {}
    rewards = [e.reward for e in episodes]
    calls = sum(e.tool_calls for e in episodes)
    malformed = sum(e.malformed_calls for e in episodes)
    out = {
        f"{prefix}/reward_mean": statistics.fmean(rewards),
        f"{prefix}/reward_std": statistics.pstdev(rewards),
        f"{prefix}/reward_max": max(rewards),
        f"{prefix}/turns_mean": statistics.fmean(e.turns for e in episodes),
        f"{prefix}/turns_max": max(e.turns for e in episodes),
        f"{prefix}/tool_calls_mean": calls / len(episodes),
        f"{prefix}/readable_calls_mean": (calls - malformed) / len(episodes),  # calls that ran
        f"{prefix}/format_validity": (calls - malformed) / calls if calls else None,
        f"{prefix}/response_tokens_mean": statistics.fmean(e.generated_tokens for e in episodes),
        f"{prefix}/sequence_tokens_mean": statistics.fmean(len(e.token_ids) for e in episodes),
        f"{prefix}/retokenize_mismatch": sum(e.retokenize_match is False for e in episodes) / len(episodes),
    }
    for component in ("recall", "precision"):
        values = [e.reward_components[component] for e in episodes if component in e.reward_components]
        if values:
            out[f"{prefix}/{component}_mean"] = statistics.fmean(values)
    finishes = Counter(e.finish_reason for e in episodes)
    out[f"{prefix}/errors"] = float(finishes.get("error", 0))
    for reason in FINISH_REASONS:
        out[f"{prefix}/finish_{reason}"] = finishes.get(reason, 0) / len(episodes)
    return out
