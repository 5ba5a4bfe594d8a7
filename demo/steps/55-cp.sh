# astra-grpo context parallelism (issue 8): an SFT step with every sequence sharded over 2 CPU
# processes (DP=1 x CP=2, Ulysses all-to-all around attention), launched with `accelerate launch`
# through the trainer scripts; then a GRPO step from the grpo step's warm start (rollouts per process,
# one group of 4 dealt to two ranks, the update under CP), on the embedded SmolLM2-135M itself: its 9
# attention heads do not split over 2 ranks, so they are padded to 10 (a test holds loss and gradients to
# CP=1). Both steps see what step 50's first steps saw at CP=1 (the same batch; the same prompt and seed),
# so their losses and gradient norms are printed side by side.
C="$OUT/cp"
mkdir -p "$C"
DATA="$OUT/grpo/sft_data.jsonl"   # the trajectories of the grpo step
# Run on its own (without the earlier steps): astra-reward's bundled trajectories.
RL_DATA="$OUT/grpo/rl_data.jsonl"  # and its RL samples
[ -s "$DATA" ] || DATA="$(astra-reward sample-data)/trajectories.jsonl"
[ -s "$RL_DATA" ] || RL_DATA="$(astra-reward sample-data)/samples.jsonl"
head -1 "$RL_DATA" > "$C/rl_data.jsonl"
POLICY="$OUT/grpo/sft/final"  # GRPO from the warm start of the grpo step (else from the CP SFT step's weights)
[ -d "$POLICY" ] || POLICY="$C/sft/final"

MAIN_PROCESS_PORT="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
  packages/astra-grpo/scripts/train_sft.sh cpu_2proc.yaml sft_tiny_cpu.yaml "$DATA" \
  --context-parallel-size 2 --output-dir "$C/sft" --batch-size 2 --micro-batch-size 1 --max-steps 1 \
  --max-length 1024 --learning-rate 2e-5 --warmup-ratio 0 --report-to none
python - "$C/sft" "$OUT/grpo/sft" <<'PY'
import json, os, sys
cp1 = os.path.join(sys.argv[2], "metrics.jsonl")  # the grpo step's SFT at CP=1: the same first batch
reference = json.loads(open(cp1).readline()) if os.path.exists(cp1) else None
for step in (json.loads(line) for line in open(f"{sys.argv[1]}/metrics.jsonl")):
    same = (f" (CP=1 on the same batch, step 50: loss {reference['loss']:.4f}, grad norm {reference['grad_norm']:.3f})"
            if reference and step["step"] == 1 else "")
    print(f"cp: step {step['step']}: loss {step['loss']:.4f} over {step['trainable_tokens']:.0f} assistant tokens, "
          f"grad norm {step['grad_norm']:.3f}{same}")
PY

MAIN_PROCESS_PORT="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')" \
  packages/astra-grpo/scripts/train_grpo.sh cpu_2proc.yaml grpo_tiny_cpu.yaml "$C/rl_data.jsonl" --model "$POLICY" \
  --context-parallel-size 2 --output-dir "$C/grpo" --batch-size 1 --group-size 4 --mini-batch-size 1 \
  --micro-batch-size 4 --max-steps 1 --max-turns 2 --max-new-tokens 48 --max-response-length 256 --abf-max-rounds 1 \
  --sandbox-pool-size 2 --learning-rate 2e-6 --report-to none --rejects "$C/rejects.grpo.jsonl"
python - "$C/grpo" "$OUT/grpo/train" <<'PY'
import json, os, sys
cp1 = os.path.join(sys.argv[2], "metrics.jsonl")  # the grpo step's first step at CP=1: the same prompt and seed
reference = json.loads(open(cp1).readline()) if os.path.exists(cp1) else None
for step in (json.loads(line) for line in open(f"{sys.argv[1]}/metrics.jsonl")):
    same = (f" (CP=1, step 50's first step: reward {reference['rollout/reward_mean']:.3f}, loss {reference['loss']:.4f}, "
            f"grad norm {reference['grad_norm']:.3f})" if reference and step["step"] == 1 else "")
    print(f"cp: grpo step {step['step']}: reward {step['rollout/reward_mean']:.3f} over "
          f"{step['rollout/turns_mean']:.1f} turns per episode, loss {step['loss']:.4f}, grad norm {step['grad_norm']:.3f}"
          f"{same}")
PY
