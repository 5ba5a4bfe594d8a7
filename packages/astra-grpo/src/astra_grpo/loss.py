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

    loss: torch.Tensor       # the per-token loss: -min(ratio * A, clip(ratio) * A) (+ beta KL - c H)
    ratio: torch.Tensor
    clipped_low: torch.Tensor   # 1 where the lower clip bound is the active term
    clipped_high: torch.Tensor  # 1 where the upper clip bound is the active term
    kl: torch.Tensor | None


def policy_terms(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, *,
                 eps_low: float, eps_high: float, ref_logprobs: torch.Tensor | None = None, kl_coef: float = 0.0,
                 entropies: torch.Tensor | None = None, entropy_coef: float = 0.0) -> PolicyTerms:
    """Clipped surrogate of Eq. 32 per token, with separate clip bounds and optional KL / entropy terms."""
    advantage = advantages[:, None]
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantage
    loss = -torch.minimum(unclipped, clipped)
    kl = None
    if ref_logprobs is not None and kl_coef > 0:
        # k3 estimator of KL(pi_theta || pi_ref): unbiased and always >= 0.
        log_ratio = ref_logprobs - logprobs
        kl = torch.exp(log_ratio) - log_ratio - 1.0
        loss = loss + kl_coef * kl
    if entropies is not None and entropy_coef > 0:
        loss = loss - entropy_coef * entropies
    with torch.no_grad():
        low = ((ratio < 1.0 - eps_low) & (advantage < 0)).float()
        high = ((ratio > 1.0 + eps_high) & (advantage > 0)).float()
    return PolicyTerms(loss=loss, ratio=ratio.detach(), clipped_low=low, clipped_high=high, kl=kl)


def objective_share(per_token: torch.Tensor, mask: torch.Tensor, mode: str, total_tokens: float,
                    total_sequences: float) -> torch.Tensor:
    """This micro-batch's share of the mini-batch objective (see the module docstring). Masked positions
    count as exactly 0 even where their terms are not finite; a micro-batch with no trainable token
    contributes 0 (with a gradient of 0), never NaN."""
    masked = torch.where(mask.bool(), per_token, torch.zeros_like(per_token))
    if mode == "token":
        return masked.sum() / max(total_tokens, 1.0)
    if mode == "sequence":
        per_sequence = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_sequence.sum() / total_sequences
    raise ValueError(f"loss averaging must be token or sequence, got {mode!r}")


def backward_scale(num_processes: int, accumulation_steps: int) -> float:
    """Factor from a share to the loss given to `accelerator.backward` (undoes its two averagings)."""
    return float(num_processes * accumulation_steps)


def sft_token_loss(logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood."""
    return -logprobs
