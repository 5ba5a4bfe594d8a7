# astra-reward: the F1 trajectory reward (3 variants), the state verifier with its diff, and the three
# LLM judges on the embedded model (guided JSON gives the reply's shape; SmolLM2's scores are poor, and
# what it leaves out comes back null with judge_errors, never an invented score).
mkdir -p "$OUT/reward"
DATA="$(astra-reward sample-data)"

# F1 on bundled rollouts joined with the rl_samples they were played from (job = sub-Q–A pairs).
for variant in f1 recall precision; do
  astra-reward f1 "$DATA/rollouts.jsonl" --samples "$DATA/samples.jsonl" --variant "$variant" \
    > "$OUT/reward/rollouts.$variant.jsonl"
done
python - "$OUT/reward" <<'EOF'
import json, sys
rows = {}
for variant in ("f1", "recall", "precision"):
    for line in open(f"{sys.argv[1]}/rollouts.{variant}.jsonl"):
        r = json.loads(line)
        c = r["reward_components"]
        rows.setdefault(r["id"], [f"{c['solved']}/{c['n']} solved, {c['calls']} calls"]).append(f"{r['reward']:.3f}")
print(f"{'rollout':26} {'sub-tasks, calls':24} {'f1':>6} {'recall':>6} {'prec.':>6}")
for rid, (what, *rewards) in rows.items():
    print(f"{rid:26} {what:24} " + " ".join(f"{x:>6}" for x in rewards))
EOF

# F1 with a threshold: low-reward rollouts go to rejects with their reason.
astra-reward f1 "$DATA/rollouts.jsonl" --samples "$DATA/samples.jsonl" --min-score 0.7 \
  --rejects "$OUT/reward/rollouts.low.jsonl" > "$OUT/reward/rollouts.kept.jsonl"

# State verifier: exact comparison with ignored fields; the diff names each differing path.
astra-reward state "$DATA/states.jsonl" --min-score 1 --rejects "$OUT/reward/states.mismatch.jsonl" \
  > "$OUT/reward/states.match.jsonl"
python -c "
import json, sys
for line in open('$OUT/reward/states.mismatch.jsonl'):
    entry = json.loads(line)
    print('state mismatch in', entry['id'] + ':')
    for d in entry['record']['reward_components']['diff']:
        print(f\"  {d['path']}: expected {d['expected']!r}, got {d['actual']!r} ({d['kind']})\")
"

# LLM judges on the embedded model, one bundled record each, run side by side so the server batches
# their requests; short replies keep it quick. The first runs with a cluster's proxy in its environment (a
# dead one here): an endpoint elsewhere would be asked through it, one on this machine never is.
JUDGE_OPTS=(--max-tokens 32 --attempts 1 --max-chars 300 --timeout 900)
head -n 1 "$DATA/trajectories.jsonl" | HTTP_PROXY=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9 \
  astra-reward judge-trajectory "${JUDGE_OPTS[@]}" \
  > "$OUT/reward/trajectories.judged.jsonl" & trajectory_pid=$!
head -n 1 "$DATA/qa_instances.jsonl" | astra-reward judge-qa "${JUDGE_OPTS[@]}" \
  > "$OUT/reward/qa.judged.jsonl" & qa_pid=$!
head -n 1 "$DATA/tasks.jsonl" | astra-reward judge-task --servers "$DATA/servers.jsonl" "${JUDGE_OPTS[@]}" \
  > "$OUT/reward/tasks.judged.jsonl" & task_pid=$!
wait "$trajectory_pid"; wait "$qa_pid"; wait "$task_pid"
python - "$OUT/reward" <<'EOF'
import json, sys
for name in ("trajectories", "qa", "tasks"):
    for line in open(f"{sys.argv[1]}/{name}.judged.jsonl"):
        record = json.loads(line)
        scores = {k: v for k, v in record["scores"].items() if k not in ("details", "judge_errors", "not_applicable")}
        print(f"{record['id']}: {json.dumps(scores)}")
        if record["scores"]["judge_errors"]:
            print(f"  unscored (judge output unusable): {', '.join(record['scores']['judge_errors'])}")
EOF
# A base URL without /v1 (servers print their address without it): the judge stops at its first request, saying
# where /v1 goes, instead of rejecting every record in turn (which --resume would then skip as done).
if head -n 1 "$DATA/trajectories.jsonl" | astra-reward judge-trajectory "${JUDGE_OPTS[@]}" \
    --base-url "${ASTRA_LLM_BASE_URL%/v1}" > /dev/null 2> "$OUT/reward/no_v1.txt"; then
  echo "expected a base URL without /v1 to stop the judge"; exit 1
fi
echo "$(tail -n 1 "$OUT/reward/no_v1.txt")"
