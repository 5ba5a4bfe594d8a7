"""The GRPO objective (paper Eq. 32) and the SFT loss, as per-token terms and their global averages.

Both trainers compute, per micro-batch, that micro-batch's *share of the global objective*:

    token averaging:    sum over its masked tokens of l_t / N      (N = masked tokens of the whole
                                                                     mini-batch, all processes)
    sequence averaging: sum over its sequences of mean_t l_t / S    (S = sequences of the mini-batch)

Summed over micro-batches and processes, the shares are exactly the objective. `backward_scale`
turns a share into what must be passed to `accelerator.backward`, which divides by the
gradient-accumulation steps (DeepSpeed's engine does the same) while DDP/ZeRO average over the
processes: multiplying by both makes the resulting gradient the gradient of the objective, with no
division left over and none done twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SCALE_REWARDS = ("group", "batch", "none")


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "group", eps: float = 1e-6,
                     valid: torch.Tensor | None = None) -> torch.Tensor:
    """GRPO advantages in float64: r - mean(group), divided by the std of the group (`group`, GRPO),
    of the whole batch (`batch`, as TRL's scale_rewards="batch") or by nothing (`none`, Dr. GRPO).

    A group whose rewards are all equal, that has a non-finite reward, or that `valid` (one flag per
    group) marks invalid gets advantages of exactly 0: no learning signal, never NaN.
    """
    if scale not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {' | '.join(SCALE_REWARDS)}, got {scale!r}")
    grouped = rewards.to(torch.float64).view(-1, group_size)
    usable = torch.isfinite(grouped).all(dim=1) & (grouped.amax(dim=1) > grouped.amin(dim=1))
    if valid is not None:
        usable &= valid.to(torch.bool)
    grouped = torch.where(usable[:, None], grouped, torch.zeros_like(grouped))
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale == "batch":
        kept = grouped[usable].reshape(-1)
        spread = kept.std() if kept.numel() > 1 else torch.zeros((), dtype=torch.float64)
        centred = centred / (spread + eps)
    usable = usable[:, None] & torch.isfinite(centred)  # rewards so far apart that their std overflows
    return torch.where(usable, centred, torch.zeros_like(centred)).reshape(-1)


@dataclass
class PolicyTerms:
    """Per-token quantities of one micro-batch ([B, T], meaningful where the mask is 1)."""

    loss: torch.Tensor       # the per-token loss of the chosen surrogate (+ beta KL - c H)
    ratio: torch.Tensor      # the importance ratio the surrogate used (per token, or its sequence's, broadcast)
    clipped_low: torch.Tensor   # 1 where the lower clip bound is the active term
    clipped_high: torch.Tensor  # 1 where the upper bound (clip, CISPO's cap, two-sided delta) is the active term
    kl: torch.Tensor | None


@dataclass(frozen=True)
class Objective:
    """Which policy surrogate a micro-batch's loss is (the `objective` knobs of GRPOConfig).

    - `loss_type`: clip (PPO/GRPO/DAPO's clipped surrogate, Eq. 32) | cispo (MiniMax-M1: the capped, detached
      ratio weights a REINFORCE term, so clipped tokens still get a gradient) | sapo (Soft Adaptive Policy
      Optimization: a sigmoid gate of the ratio instead of a hard clip) | vespo (a gamma-shaped weight of the
      sequence's ratio, detached, on A log pi).
    - `importance_sampling_level`: token | sequence (GSPO: one ratio per sequence, the exp of its tokens' mean
      log-ratio, clipped as a whole).
    - `delta`: two-sided clipping (INTELLECT-2): with a negative advantage the ratio is also capped at delta
      (0: off).
    """

    loss_type: str = "clip"
    importance_sampling_level: str = "token"
    eps_low: float = 0.2
    eps_high: float = 0.2
    delta: float = 0.0
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0


LOSS_TYPES = ("clip", "cispo", "sapo", "vespo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")


def log_importance_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor | None,
                         level: str) -> torch.Tensor:
    """log pi_theta / pi_old per token, or GSPO's per sequence (its masked tokens' mean, broadcast over them)."""
    log_ratio = logprobs - old_logprobs
    if level == "token":
        return log_ratio
    if level == "sequence":
        if mask is None:
            raise ValueError("a sequence-level importance ratio needs the loss mask")
        weights = mask.to(log_ratio.dtype)
        masked = torch.where(mask.bool(), log_ratio, torch.zeros_like(log_ratio))
        per_sequence = (masked * weights).sum(dim=1, keepdim=True) / weights.sum(dim=1, keepdim=True).clamp(min=1.0)
        return per_sequence.expand_as(log_ratio)
    raise ValueError(f"importance_sampling_level must be one of {' | '.join(IMPORTANCE_SAMPLING_LEVELS)}, "
                     f"got {level!r}")


def clip_surrogate(ratio, logprobs, advantage, objective: Objective, log_ratio, mask):
    """-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), with r capped at delta first where delta > 0."""
    clipped = torch.clamp(ratio, 1.0 - objective.eps_low, 1.0 + objective.eps_high) * advantage
    capped = torch.clamp(ratio, max=objective.delta) if objective.delta > 0 else ratio
    loss = -torch.minimum(capped * advantage, clipped)
    with torch.no_grad():
        low = (ratio < 1.0 - objective.eps_low) & (advantage < 0)
        high = ((ratio > 1.0 + objective.eps_high) & (advantage > 0))
        if objective.delta > 0:
            high |= (ratio > objective.delta) & (advantage < 0)
    return loss, low, high


def cispo_surrogate(ratio, logprobs, advantage, objective: Objective, log_ratio, mask):
    """-sg(min(r, 1 + eps_high)) A log pi_theta (MiniMax-M1, arXiv 2506.13585): every token keeps its gradient."""
    weight = torch.clamp(ratio, max=1.0 + objective.eps_high).detach()
    with torch.no_grad():
        high = ratio > 1.0 + objective.eps_high
    return -weight * advantage * logprobs, torch.zeros_like(high), high


def sapo_surrogate(ratio, logprobs, advantage, objective: Objective, log_ratio, mask):
    """-(4 / tau) sigmoid(tau (r - 1)) A, tau by the advantage's sign (SAPO, arXiv 2511.20347): a soft trust
    region whose gradient at r = 1 is the policy gradient's and fades smoothly away from it. Nothing is clipped."""
    tau = torch.where(advantage > 0, objective.sapo_temperature_pos, objective.sapo_temperature_neg)
    none = torch.zeros_like(ratio, dtype=torch.bool)
    return -torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau * advantage, none, none


def vespo_surrogate(ratio, logprobs, advantage, objective: Objective, log_ratio, mask):
    """-sg(phi(w)) A log pi_theta with phi(w) = e^lambda w^k e^(-lambda w) of the sequence's ratio w (the product of
    its tokens' ratios; k, lambda by the advantage's sign): VESPO (arXiv 2602.10693), a smooth, normalised
    (phi(1) = 1) weight that fades for sequences far off-policy either way, instead of clipping tokens."""
    with torch.no_grad():
        floor = math.log(1e-8)
        if mask is None:
            raise ValueError("loss_type vespo needs the loss mask")
        clamped = torch.where(mask.bool(), log_ratio.clamp(-20.0, 20.0), torch.zeros_like(log_ratio))
        log_w = (clamped * mask).sum(dim=1, keepdim=True).clamp(floor, 20.0)
        nonnegative = advantage >= 0
        k = torch.where(nonnegative, objective.vespo_k_pos, objective.vespo_k_neg)
        lam = torch.where(nonnegative, objective.vespo_lambda_pos, objective.vespo_lambda_neg).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    none = torch.zeros_like(ratio, dtype=torch.bool)
    return -phi * advantage * logprobs, none, none


SURROGATES = {"clip": clip_surrogate, "cispo": cispo_surrogate, "sapo": sapo_surrogate, "vespo": vespo_surrogate}


def policy_terms(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, *,
                 eps_low: float = 0.2, eps_high: float = 0.2, ref_logprobs: torch.Tensor | None = None,
                 kl_coef: float = 0.0, entropies: torch.Tensor | None = None, entropy_coef: float = 0.0,
                 objective: Objective | None = None, mask: torch.Tensor | None = None) -> PolicyTerms:
    """The chosen surrogate per token (the clipped surrogate of Eq. 32 by default, with separate clip bounds),
    with optional KL / entropy terms. `objective` (if given) carries the clip bounds itself; `mask` (the loss
    mask) is needed by the sequence-level ratio."""
    objective = objective or Objective(eps_low=eps_low, eps_high=eps_high)
    if objective.loss_type not in SURROGATES:
        raise ValueError(f"loss_type must be one of {' | '.join(LOSS_TYPES)}, got {objective.loss_type!r}")
    advantage = advantages[:, None]
    ratio = torch.exp(log_importance_ratio(logprobs, old_logprobs, mask, objective.importance_sampling_level))
    loss, low, high = SURROGATES[objective.loss_type](ratio, logprobs, advantage, objective,
                                                      logprobs - old_logprobs, mask)
    kl = None
    if ref_logprobs is not None and kl_coef > 0:
        # k3 estimator of KL(pi_theta || pi_ref): unbiased and always >= 0.
        log_ratio = ref_logprobs - logprobs
        kl = torch.exp(log_ratio) - log_ratio - 1.0
        loss = loss + kl_coef * kl
    if entropies is not None and entropy_coef > 0:
        loss = loss - entropy_coef * entropies
    return PolicyTerms(loss=loss, ratio=ratio.detach(), clipped_low=low.float(), clipped_high=high.float(), kl=kl)


def high_entropy_masks(entropies: list[torch.Tensor], masks: list[torch.Tensor], quantile: float,
                       gather=lambda values: values) -> list[torch.Tensor]:
    """Learning on the highest-entropy tokens only ("Beyond the 80/20 rule", Wang et al., arXiv 2506.01939): per
    micro-batch, 1 on the loss tokens whose entropy is at least the (1 - quantile) quantile of the entropies of
    every loss token of all the given micro-batches (`gather` joins those of the other processes), else 0."""
    values = gather(torch.cat([e[m.bool()].float() for e, m in zip(entropies, masks, strict=True)]))
    if values.numel() == 0:
        return [torch.zeros_like(m) for m in masks]
    threshold = torch.quantile(values, 1.0 - quantile)
    return [((e.float() * m.float() >= threshold) & m.bool()).to(m.dtype) for e, m in zip(entropies, masks,
                                                                                             strict=True)]


LOSS_AVERAGES = ("token", "sequence", "sequence_sum", "fixed")


def objective_share(per_token: torch.Tensor, mask: torch.Tensor, mode: str, total_tokens: float,
                    total_sequences: float, fixed_length: float | None = None) -> torch.Tensor:
    """This micro-batch's share of the mini-batch objective (see the module docstring). Masked positions
    count as exactly 0 even where their terms are not finite; a micro-batch with no trainable token
    contributes 0 (with a gradient of 0), never NaN.

    Modes: token (DAPO: the mini-batch's masked tokens), sequence (GRPO: each sequence's token mean, averaged),
    sequence_sum (LUSPO: each sequence's token sum, averaged: longer sequences weigh more), fixed (Dr. GRPO: the
    token sum over sequences x `fixed_length`, a constant, so no length bias either way)."""
    masked = torch.where(mask.bool(), per_token, torch.zeros_like(per_token))
    if mode == "token":
        return masked.sum() / max(total_tokens, 1.0)
    if mode == "sequence":
        per_sequence = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_sequence.sum() / total_sequences
    if mode == "sequence_sum":
        return masked.sum() / total_sequences
    if mode == "fixed":
        if not fixed_length:
            raise ValueError("loss averaging fixed needs the fixed length (max_response_length)")
        return masked.sum() / (total_sequences * fixed_length)
    raise ValueError(f"loss averaging must be one of {' | '.join(LOSS_AVERAGES)}, got {mode!r}")


def backward_scale(num_processes: int, accumulation_steps: int) -> float:
    """Factor from a share to the loss given to `accelerator.backward` (undoes its two averagings)."""
    return float(num_processes * accumulation_steps)


def sft_token_loss(logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood."""
    return -logprobs
