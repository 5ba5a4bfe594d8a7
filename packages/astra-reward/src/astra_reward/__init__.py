"""astra-reward: rewards for tool-use agents — the F1 trajectory reward, a state verifier and LLM judges.

    from astra_reward import f1_reward, state_reward
    r = f1_reward(sample["job"], rollout["messages"])          # F1Result(reward, recall, precision, ...)
    s = state_reward(final_state, expected_state, ignore_fields=["orders.*.created_at"])

The judges (async, over an `astra_core.llm.LLMClient`) live in `astra_reward.judges`.
"""

from astra_reward.f1 import F1Result, f1_from_counts, f1_reward
from astra_reward.normalize import contains_answer, normalize_answer
from astra_reward.state import StateResult, state_diff, state_reward

__version__ = "0.1.0"

__all__ = ["F1Result", "StateResult", "contains_answer", "f1_from_counts", "f1_reward", "normalize_answer",
           "state_diff", "state_reward"]
