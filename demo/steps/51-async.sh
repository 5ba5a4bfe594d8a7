# Asynchronous GRPO (issue 55): rollouts for the next step are played while a step trains, each group at most
# max_staleness policy versions behind the policy it trains (enforced when a rollout round starts). The same
# 2 steps from step 50's SFT weights, synchronous (k = 0) and asynchronous (k = 1: the engine in a process of its
# own, the update in this one, one thread each), then each run's staleness histogram and idle fractions.
# (benchmarks/async_rl.py measures the speed-up; on these tiny steps the engine process's start dominates.)
A="$OUT/async"
mkdir -p "$A"
for k in 0 1; do
  OMP_NUM_THREADS=1 astra-grpo train "$OUT/grpo/rl_data.jsonl" --config grpo_tiny_cpu.yaml --model "$OUT/grpo/sft/final" \
    --output-dir "$A/k$k" --batch-size 1 --group-size 4 --mini-batch-size 1 --micro-batch-size 4 --max-steps 2 \
    --max-turns 2 --max-new-tokens 32 --max-response-length 384 --abf-max-rounds 1 --learning-rate 1e-5 \
    --sandbox-pool-size 4 --report-to "" --max-staleness "$k" --rollouts-out "$A/k$k.rollouts.jsonl" 2> "$A/k$k.log"
  grep "staleness (versions" "$A/k$k.log" || true
done
python - "$A" <<'PY'
import json, sys
a = sys.argv[1]
for k in (0, 1):
    steps = [json.loads(line) for line in open(f"{a}/k{k}/metrics.jsonl")]
    for s in steps:
        histogram = {key.split("/")[1]: int(v) for key, v in s.items() if key.startswith("staleness/")
                     and key.split("/")[1].isdigit()}
        print(f"async: k={k} step {s['step']}: {s['step_seconds']:.1f} s, staleness (versions: groups) {histogram}, "
              f"engine idle {s['engine_idle_fraction']:.0%}, trainer idle {s['trainer_idle_fraction']:.0%}")
    trained = [json.loads(line) for line in open(f"{a}/k{k}.rollouts.jsonl")]
    print(f"async: k={k}: {sum(r['status'] == 'trained' for r in trained)} episodes trained, "
          f"{sum(bool(r.get('reason')) for r in trained)} played ahead and unused at the end (discarded, with the reason)")
PY
