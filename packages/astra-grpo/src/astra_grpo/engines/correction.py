"""Truncated importance sampling for the rollout/trainer mismatch (as verl's TIS and TRL's token_truncate).

vLLM samples with its own kernels (and bf16 weights), so the probability it sampled a token with is
not exactly the one the trainer computes for the same weights: the episodes are slightly off-policy.
Each token's loss is weighted by

    w_t = min(exp(log pi_trainer_old(y_t) - log pi_sampler(y_t)), C)

(detached: it reweights, it is not optimised), which makes the update an estimate under the trainer's
own policy; the cap C bounds the variance a rare large ratio would bring.

Per episode, the sampler's log-probs are kept aligned with its tokens: the value vLLM reported on
generated tokens, NaN elsewhere (prompt, observations). A generated token whose sampler log-prob is
NaN gets weight 0 (it cannot be corrected); tokens outside the loss mask get weight 1 (they carry no loss).

Asynchronous GRPO (max_staleness > 0) trains on episodes a few policy versions old with the same weight: this is
AReaL's decoupled objective. The clip is taken around the *proximal* policy, the trainer's weights at the start
of the update (the old log-probs the update computes anyway), and the *behaviour* policy that sampled the tokens
(whichever version it was, the engine's reported log-probs) enters only through the truncated weight

    loss_t = -min(C, pi_prox(y_t) / pi_behav(y_t)) * min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A),
    r_t = pi_theta(y_t) / pi_prox(y_t)

(the cap C is `behaviour_weight_cap`). When the behaviour policy is the proximal one (on-policy) every weight is
exactly 1 and the loss is the synchronous one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

UNSAMPLED = math.nan  # the sampler log-prob of a token the policy did not generate


def enabled(config) -> bool:
    """The correction is on for asynchronous runs (the decoupled objective) and for the vLLM engine
    (GRPOConfig.vllm_importance_sampling); the synchronous transformers engine samples with the trainer's own
    model, where there is nothing to correct."""
    return config.max_staleness > 0 or (config.engine == "vllm" and config.vllm_importance_sampling)


def cap(config) -> float:
    """The cap C of the weights: the decoupled objective's in asynchronous runs, else the vLLM correction's."""
    return config.behaviour_weight_cap if config.max_staleness > 0 else config.vllm_importance_sampling_cap


def of(config) -> Correction:
    """The correction a config asks for (its cap, level, mode and lower bound)."""
    return Correction(cap=cap(config), level=config.importance_correction_level,
                      mode=config.importance_correction_mode, low=config.importance_correction_min)


def record(episode, generated: Sequence[float] | None, start: int) -> None:
    """Keep the sampler's log-probs of a turn whose tokens start at position `start` of the episode, in
    `episode.sampler_logprobs` (aligned with its tokens; NaN on the tokens before that no turn generated)."""
    if generated is None:
        return
    aligned = episode.sampler_logprobs if episode.sampler_logprobs is not None else []
    aligned.extend([UNSAMPLED] * (start - len(aligned)))
    aligned.extend(generated)
    episode.sampler_logprobs = aligned


def extend(sampler_logprobs: list[float], generated: Sequence[float] | None, count: int) -> None:
    """Append one turn's sampler log-probs (NaN for each of `count` tokens when the engine gave none)."""
    sampler_logprobs.extend(generated if generated is not None else [UNSAMPLED] * count)


def pad(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """Per-episode sampler log-probs as a right-padded [B, T] tensor (NaN where there is none)."""
    out = torch.full((len(rows), width), math.nan, dtype=torch.float32)
    for index, row in enumerate(rows):
        out[index, :len(row)] = torch.tensor(list(row), dtype=torch.float32)
    return out


@dataclass(frozen=True)
class Correction:
    """How the importance weights w = pi_trainer_old / pi_sampler are formed (the `importance_correction_*` knobs):

    - `level`: token (w per token, verl's token TIS) | sequence (the product over the sequence's sampled tokens:
      exp of the summed log-ratio, TRL's sequence_* modes) | geometric (the geometric mean: exp of the mean
      log-ratio, verl's geo-mean masking), one weight for all of a sequence's tokens.
    - `mode`: truncate (w clamped to [low, cap], TIS) | mask (tokens, or sequences, whose w falls outside
      [low, cap] get weight 0, the rest keep w: masked IS; token mask with low = 0.5, cap = 2 is IcePop).
    """

    cap: float = 2.0
    level: str = "token"
    mode: str = "truncate"
    low: float = 0.0


LEVELS = ("token", "sequence", "geometric")
MODES = ("truncate", "mask")


def log_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, usable: torch.Tensor,
                level: str) -> torch.Tensor:
    """log w per token [B, T]: the token's log-ratio, or its sequence's sum or mean over `usable` tokens."""
    diff = torch.where(usable, old_logprobs - sampler_logprobs, torch.zeros_like(old_logprobs))
    if level == "token":
        return diff
    if level == "sequence":
        return diff.sum(dim=1, keepdim=True).expand_as(diff)
    if level == "geometric":
        count = usable.sum(dim=1, keepdim=True).clamp(min=1)
        return (diff.sum(dim=1, keepdim=True) / count).expand_as(diff)
    raise ValueError(f"importance_correction_level must be one of {' | '.join(LEVELS)}, got {level!r}")


def constrained(ratio: torch.Tensor, correction: Correction) -> torch.Tensor:
    if correction.mode == "truncate":
        return ratio.clamp(min=correction.low, max=correction.cap) if correction.low > 0 else ratio.clamp(
            max=correction.cap)
    if correction.mode == "mask":
        return torch.where((ratio < correction.low) | (ratio > correction.cap), torch.zeros_like(ratio), ratio)
    raise ValueError(f"importance_correction_mode must be one of {' | '.join(MODES)}, got {correction.mode!r}")


def is_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
               correction: Correction) -> torch.Tensor:
    """The weights on masked tokens; 0 on masked tokens without a sampler log-prob; 1 elsewhere.
    `old_logprobs` are the trainer's (the old policy's) log-probs of the same tokens, [B, T]."""
    old = old_logprobs.detach().float()
    sampler = sampler_logprobs.to(old.device).float()
    known = ~torch.isnan(sampler)
    masked = mask > 0
    ratio = constrained(torch.exp(log_weights(old, sampler, known & masked, correction.level)), correction)
    weights = torch.where(masked & known, ratio, torch.zeros_like(ratio))
    return torch.where(masked, weights, torch.ones_like(weights))


def truncated_is_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
                         cap: float) -> torch.Tensor:
    """Token-level truncated weights min(exp(old - sampler), cap) (the default correction)."""
    return is_weights(old_logprobs, sampler_logprobs, mask, Correction(cap=cap))


def weighted_loss(per_token_loss: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The per-token loss with each token's importance weight (what objective_share then averages)."""
    return per_token_loss * weights.to(per_token_loss.dtype)


def mismatch_sums(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor,
                  cap: float | Correction) -> dict[str, float]:
    """Sums over masked tokens with a sampler log-prob, for step metrics (divide by `is/tokens`): the weight and
    its square (for the spread), how many the constraint changed (capped, truncated or masked), and the k3
    estimate of KL(sampler || trainer) per token."""
    correction = cap if isinstance(cap, Correction) else Correction(cap=cap)
    sampler = sampler_logprobs.to(old_logprobs.device).float()
    known = (mask > 0) & ~torch.isnan(sampler)
    old = old_logprobs.detach().float()
    token_log_ratio = (old - sampler)[known]
    ratio = torch.exp(log_weights(old, sampler, known, correction.level))[known]
    weight = constrained(ratio, correction)
    outside = (ratio > correction.cap) | (ratio < correction.low)
    ratio_k3 = torch.exp(token_log_ratio)
    return {"is/tokens": float(known.sum()), "is/weight": float(weight.sum()),
            "is/weight_sq": float((weight * weight).sum()), "is/capped": float(outside.sum()),
            "is/k3_kl": float((ratio_k3 - token_log_ratio - 1).sum())}


SUM_KEYS = ("is/tokens", "is/weight", "is/weight_sq", "is/capped", "is/k3_kl")


def micro_batch(episodes: Sequence, old_logprobs: torch.Tensor, mask: torch.Tensor,
                correction: float | Correction) -> tuple[torch.Tensor, dict[str, float]]:
    """The importance weights of a micro-batch ([B, T]) and its mismatch sums. An episode without sampler
    log-probs (an engine that reports none) is weighted 1: its sampler counts as the trainer."""
    correction = correction if isinstance(correction, Correction) else Correction(cap=correction)
    width = old_logprobs.shape[1]
    sampler = pad([getattr(e, "sampler_logprobs", None) or [] for e in episodes], width).to(old_logprobs.device)
    for row, episode in enumerate(episodes):
        if getattr(episode, "sampler_logprobs", None) is None:
            sampler[row] = old_logprobs[row].detach().float()
    return is_weights(old_logprobs, sampler, mask, correction), mismatch_sums(old_logprobs, sampler, mask, correction)


def step_metrics(total: dict[str, float]) -> dict[str, float]:
    """Step metrics from the global sums: mean weight, capped fraction, KL(sampler || trainer) per token."""
    tokens = max(total["is/tokens"], 1.0)
    mean = total["is/weight"] / tokens
    spread = math.sqrt(max(total.get("is/weight_sq", 0.0) / tokens - mean * mean, 0.0))
    return {"is/weight_mean": mean, "is/weight_std": spread, "is/capped_fraction": total["is/capped"] / tokens,
            "is/k3_kl": total["is/k3_kl"] / tokens}
