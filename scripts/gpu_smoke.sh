#!/usr/bin/env bash
# GPU smoke test of astra-grpo's colocated vLLM engine (CI has no GPU; run this on a machine that has one).
#   scripts/gpu_smoke.sh MODEL_DIR [OUT_DIR]
# MODEL_DIR: a local Hugging Face checkpoint with a chat template (a small one: e.g. Qwen3-0.6B).
# Needs the vllm and deepspeed extras in the Python it runs (ASTRA_GRPO_PYTHON, default `python`), e.g.
#   UV_PROJECT_ENVIRONMENT=.venv-gpu python3 -m uv sync --package astra-grpo --extra vllm --extra deepspeed --no-dev
#   ASTRA_GRPO_PYTHON=.venv-gpu/bin/python scripts/gpu_smoke.sh /models/Qwen3-0.6B
#
# 1. One process started as plain `python -m astra_grpo.cli train` (no launcher: the engine sets RANK, LOCAL_RANK,
#    WORLD_SIZE, MASTER_ADDR, MASTER_PORT for vLLM's external launcher): 2 GRPO steps with the vLLM engine.
# 2. DeepSpeed ZeRO-3 through accelerate launch with 2 processes, one per GPU (the weights reach vLLM one gathered
#    parameter at a time), with a KL penalty: its reference model is sharded like the policy. NCCL needs a
#    GPU per process: on a one-GPU machine this stage runs ZeRO-3 with 1 process (the sharded, per-parameter
#    path; the 2-process gathers are tested on CPU by test_zero3_push_gathers_one_parameter_at_a_time).
# Episodes run in astra-sandbox without nsjail unless JAIL=1. Everything goes to OUT_DIR (default out/gpu-smoke);
# the end says SMOKE OK or what failed.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: scripts/gpu_smoke.sh MODEL_DIR [OUT_DIR]}"
out="${2:-out/gpu-smoke}"
python="${ASTRA_GRPO_PYTHON:-python}"
jail_flag="--no-sandbox-jail"; [ "${JAIL:-0}" = "1" ] && jail_flag="--sandbox-jail"
mkdir -p "$out"

gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
if [ "${gpus:-0}" -lt 1 ]; then echo "gpu_smoke: no GPU found (nvidia-smi -L)" >&2; exit 2; fi
processes=$(( gpus >= 2 ? 2 : 1 ))
"$python" - "$model" <<'PY'
import sys, torch, vllm, deepspeed
from astra_grpo.engines.vllm_preflight import positions
print(f"gpu_smoke: {torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}, "
      f"{torch.cuda.mem_get_info(0)[1] / 2**30:.0f} GiB; torch {torch.__version__}, vllm {vllm.__version__}, "
      f"deepspeed {deepspeed.__version__}")
print(f"gpu_smoke: model {sys.argv[1]}: {positions(sys.argv[1]).explanation}")
PY
samples="$("$python" -c 'from importlib.resources import files; print(files("astra_reward") / "data" / "samples.jsonl")')"

# Small shapes: 2 prompts x 4 episodes per step, short turns; vLLM takes 30% of the card while it is awake.
common=(--engine vllm --model "$model" --model-dtype bfloat16 --max-steps 2 --batch-size 2 --group-size 4
        --mini-batch-size 2 --micro-batch-size 2 --max-turns 4 --max-new-tokens 256 --max-prompt-length 4096
        --max-response-length 2048 --abf-max-rounds 1 --vllm-gpu-memory-utilization 0.3 --report-to ""
        --save-weights-steps 0 --save-state-steps 0 --sandbox-pool-size 8 "$jail_flag")

run_stage() {  # name, then the command; its log is $out/$name.log
  local name="$1"; shift
  echo "gpu_smoke: [$name] $*" >&2
  local status=0
  "$@" > "$out/$name.log" 2>&1 || status=$?  # vLLM logs to stdout, astra-grpo to stderr
  "$python" - "$out" "$name" "$status" <<'PY'
import json, math, re, sys
from pathlib import Path
out, name, status = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
log = (out / f"{name}.log").read_text(errors="replace") if (out / f"{name}.log").exists() else ""
problems = [] if status == 0 else [f"exit status {status} (last lines of {out / (name + '.log')}:\n"
                                   + "\n".join(log.splitlines()[-25:]) + ")"]
metrics_file = out / name / "metrics.jsonl"
steps = [json.loads(line) for line in metrics_file.read_text().splitlines()] if metrics_file.exists() else []
for step in steps:
    print(f"gpu_smoke: [{name}] step {step['step']}: loss {step['loss']:+.4f}, reward {step['rollout/reward_mean']:.3f}, "
          f"{step['rollout/response_tokens_mean']:.0f} generated tokens/episode, {step['rollout/errors']:.0f} errors, rollout {step.get('rollout/generated_tokens_per_s') or 0:.0f} tok/s/process, "
          f"IS weight {step.get('is/weight_mean', float('nan')):.3f} (capped {step.get('is/capped_fraction', float('nan')):.3f}), "
          f"KL(vLLM||trainer) {step.get('is/k3_kl', float('nan')):.2e}/token")
if len(steps) != 2:
    problems.append(f"{len(steps)} steps in {metrics_file}, expected 2")
if steps and not all(math.isfinite(s.get("is/weight_mean", math.nan)) for s in steps):
    problems.append("no finite is/weight_mean: the sampler's log-probs did not reach the update")
if steps and max(s.get("is/k3_kl", 0.0) for s in steps) > 0.05:
    problems.append("vLLM and the trainer disagree (k3 KL > 0.05 per token): weights not pushed, or a different RoPE/dtype")
pushes = len(re.findall(r"vLLM weights pushed", log))
for line in re.findall(r"astra-grpo: vLLM weights pushed.*", log)[:1]:
    print(f"gpu_smoke: [{name}] {line}")
if pushes != 2:
    problems.append(f"{pushes} weight pushes logged, expected 2 (one after each update)")
slept = len(re.findall(r"It took [0-9.]+ seconds to fall asleep", log))
woke = re.findall(r"It took [0-9.]+ seconds to wake up tags (\S+)", log)
freed = re.findall(r"Sleep mode freed ([0-9.]+) GiB", log)
print(f"gpu_smoke: [{name}] vLLM slept {slept} times (freed {', '.join(freed[:3])} GiB ...), woke tags in order: "
      f"{' '.join(woke[:6])}")
if slept < 2 or not woke:
    problems.append("vLLM's sleep/wake lines are missing from the log")
rollouts = out / f"{name}_rollouts.jsonl"
if rollouts.exists():
    records = [json.loads(line) for line in rollouts.read_text().splitlines()]
    reasons = sorted({r["finish_reason"] for r in records})
    print(f"gpu_smoke: [{name}] {len(records)} episodes in {rollouts}; finish reasons {reasons}")
if name == "zero3" and not all(math.isfinite(s.get("kl", math.nan)) for s in steps):
    problems.append("no finite kl metric: the sharded KL reference model did not reach the update")
if not (out / name / "final" / "config.json").exists():
    problems.append(f"no final weights in {out / name / 'final'}")
for problem in problems:
    print(f"gpu_smoke: [{name}] FAILED: {problem}")
(out / f"{name}.ok").write_text("ok" if not problems else "")
PY
}

run_stage one_process env -u RANK -u LOCAL_RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
  "$python" -m astra_grpo.cli train "$samples" --config grpo_tiny_cpu.yaml "${common[@]}" \
  --output-dir "$out/one_process" --rollouts-out "$out/one_process_rollouts.jsonl"

run_stage zero3 env NUM_PROCESSES="$processes" ASTRA_GRPO_PYTHON="$python" \
  packages/astra-grpo/scripts/train_grpo.sh deepspeed_zero3.yaml grpo_tiny_cpu.yaml "$samples" "${common[@]}" \
  --kl-coef 0.05 --output-dir "$out/zero3" --rollouts-out "$out/zero3_rollouts.jsonl"
[ "$processes" = 1 ] && echo "gpu_smoke: [zero3] ran with 1 process: this machine has one GPU (NCCL needs one per process)"

if [ -s "$out/one_process.ok" ] && [ -s "$out/zero3.ok" ]; then
  echo "gpu_smoke: SMOKE OK (logs and metrics in $out)"
else
  echo "gpu_smoke: SMOKE FAILED (logs in $out)"; exit 1
fi
