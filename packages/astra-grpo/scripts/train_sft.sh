#!/usr/bin/env bash
# SFT (paper section 3.2.1) through accelerate.
#   scripts/train_sft.sh ACCELERATE_CONFIG SFT_CONFIG TRAJECTORIES.jsonl... [flags]
# e.g. scripts/train_sft.sh deepspeed_zero3.yaml sft_paper.yaml data/sft.jsonl --model /models/Qwen3-14B
#      scripts/train_sft.sh cpu_2proc.yaml sft_tiny_cpu.yaml trajectories.jsonl --max-steps 2
exec "$(dirname "$0")/launch.sh" sft "$@"
