#!/usr/bin/env bash
# Multi-turn GRPO (paper sections 3.1-3.2.2) through accelerate.
#   scripts/train_grpo.sh ACCELERATE_CONFIG GRPO_CONFIG RL_SAMPLES.jsonl... [flags]
# e.g. scripts/train_grpo.sh deepspeed_zero3.yaml grpo_paper.yaml data/rl.jsonl --model out/sft-paper/final
#      scripts/train_grpo.sh cpu_2proc.yaml grpo_tiny_cpu.yaml rl_samples.jsonl --max-steps 2
exec "$(dirname "$0")/launch.sh" train "$@"
