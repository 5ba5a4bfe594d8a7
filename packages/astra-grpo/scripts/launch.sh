#!/usr/bin/env bash
# Shared by train_sft.sh and train_grpo.sh: `accelerate launch` an astra-grpo trainer.
#   launch.sh COMMAND ACCELERATE_CONFIG TRAINER_CONFIG [astra-grpo COMMAND arguments...]
# Configs are paths or names of bundled files (`astra-grpo configs` lists them).
# Environment: NUM_PROCESSES, NUM_MACHINES, MACHINE_RANK, MAIN_PROCESS_IP, MAIN_PROCESS_PORT override the
# accelerate config; ASTRA_GRPO_PYTHON picks the Python (default: the one on PATH).
set -euo pipefail
command="${1:?trainer command (sft or train)}"
accelerate_config="${2:?accelerate config (e.g. multi_gpu.yaml, deepspeed_zero3.yaml, cpu_2proc.yaml)}"
trainer_config="${3:?trainer config (e.g. grpo_paper.yaml)}"
shift 3
python="${ASTRA_GRPO_PYTHON:-python}"

if [ ! -f "$accelerate_config" ]; then
  accelerate_config="$("$python" -m astra_grpo.cli configs --path "accelerate/$accelerate_config")"
fi
overrides=()
[ -n "${NUM_PROCESSES:-}" ] && overrides+=(--num_processes "$NUM_PROCESSES")
[ -n "${NUM_MACHINES:-}" ] && overrides+=(--num_machines "$NUM_MACHINES")
[ -n "${MACHINE_RANK:-}" ] && overrides+=(--machine_rank "$MACHINE_RANK")
[ -n "${MAIN_PROCESS_IP:-}" ] && overrides+=(--main_process_ip "$MAIN_PROCESS_IP")
[ -n "${MAIN_PROCESS_PORT:-}" ] && overrides+=(--main_process_port "$MAIN_PROCESS_PORT")
# torch's elastic agent keeps each rank's error file (a failed rank's traceback) under --log_dir: in the run's
# --output-dir if given here, else in a torchelastic_* directory it makes in TMPDIR and never removes.
arguments=("$@")
for i in "${!arguments[@]}"; do
  case "${arguments[$i]}" in
    --output-dir) [ -n "${arguments[$((i + 1))]:-}" ] && overrides+=(--log_dir "${arguments[$((i + 1))]}/launcher");;
    --output-dir=*) overrides+=(--log_dir "${arguments[$i]#--output-dir=}/launcher");;
  esac
done

exec "$python" -m accelerate.commands.launch --config_file "$accelerate_config" "${overrides[@]}" \
  -m astra_grpo.cli "$command" --config "$trainer_config" "$@"
