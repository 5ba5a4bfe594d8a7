# astra-eval: benchmarks scored by their own checkers (BFCL v3 multi-turn, tau2-bench, ACEBench, AIME).
# bfcl and tau2 run in their own environments (.venv-bfcl, .venv-tau2, made by scripts/setup):
# `astra-eval run bfcl|tau2` hands over to them.
mkdir -p "$OUT/eval/oracle" "$OUT/eval/oracle_drop" "$OUT/eval/seed0"

# 1. Harness check, no model: replay each benchmark's ground truth through our adapters (every item scores 1),
#    then a replay with 30% of the BFCL calls left out (scores drop, exactly as bfcl-eval's own runner says).
astra-eval run bfcl --oracle --limit 5 -o "$OUT/eval/oracle/bfcl.jsonl"
astra-eval run tau2 --oracle --domain airline --domain retail --domain telecom --limit 2 --trials 1 \
  -o "$OUT/eval/oracle/tau2.jsonl"  # telecom: the user acts on their device, as its ground truth says
astra-eval run acebench --oracle --split multi_turn --limit 5 --trials 1 -o "$OUT/eval/oracle/acebench.jsonl"
astra-eval run bfcl --oracle --oracle-drop-rate 0.3 --seed 1 --limit 5 -o "$OUT/eval/oracle_drop/bfcl.jsonl"
astra-eval summary "$OUT/eval/oracle" "$OUT/eval/oracle_drop" | tee "$OUT/eval/oracle_summary.txt"

# 2. The embedded model on a tiny slice of every benchmark (short replies: this shows the path, not quality).
#    AIME: 96 tokens give the tiny model room for an answer that is parsed and scored (its \boxed{} answer, else
#    the reply's last integer); each sample says which, and when the reply was cut.
astra-eval run aime --year aime2024 --limit 1 --samples 1 --max-tokens 96 --seed 0 -o "$OUT/eval/seed0/aime.jsonl"
python - "$OUT/eval" <<'PY'
import json, sys
from astra_eval.aime import last_boxed
for line in open(f"{sys.argv[1]}/seed0/aime.jsonl"):
    r = json.loads(line)
    if r["error"]:  # (an endpoint that refused the item: scored 0, and listed under Errors in the summary)
        print(f"aime: {r['item_id']} {r['setting']} seed 0: error: {r['error'][:160]}")
        continue
    for k, s in enumerate(r["details"]["samples"]):
        how = "its \\boxed{} answer" if last_boxed(s["text"]) is not None else "the last integer of its reply"
        cut = ", reply cut at the token limit" if s.get("finish_reason") == "length" else ""
        answer = (f"answer {s['answer']} ({how}{cut}): {'correct' if s['correct'] else 'wrong'}"
                  if s["answer"] is not None else f"no answer found{cut}")
        print(f"aime: {r['item_id']} {r['setting']} seed 0 sample {k}: {answer}, reference {r['details']['reference']}")
PY
astra-eval run acebench --split multi_step --limit 1 --trials 1 --max-messages 2 --max-tokens 8 --seed 0 \
  -o "$OUT/eval/seed0/acebench.jsonl"
astra-eval run bfcl --category base --ids multi_turn_base_100 --max-turns 1 --max-tokens 8 --seed 0 \
  -o "$OUT/eval/seed0/bfcl.jsonl"
astra-eval run tau2 --domain retail --limit 1 --trials 1 --max-steps 2 --max-tokens 8 --user-max-tokens 8 --seed 0 \
  -o "$OUT/eval/seed0/tau2.jsonl"

# 3. The paper-shaped summary, and the runs side by side with a bar chart.
astra-eval summary "$OUT/eval/seed0" | tee "$OUT/eval/summary.txt"
astra-eval compare "$OUT/eval/oracle" "$OUT/eval/oracle_drop" "$OUT/eval/seed0" \
  --label "ground truth replayed" --label "replayed, 30% of BFCL calls left out" \
  --label "SmolLM2-135M (embedded model), seed 0" \
  --png "$OUT/eval/compare.png" | tee "$OUT/eval/compare.txt"
