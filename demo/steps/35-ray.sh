# astra-core ray: stages of step 30 again, on Ray Data (docs/ray.md): the stage's function on Ray actors that
# open its resources once, its outputs, rejects and counts written here as in one process. Without --address or
# RAY_ADDRESS each command starts a Ray of its own on this machine (127.0.0.1); on a cluster: ray start, RAY_ADDRESS.
R="$OUT/ray"
TG="$OUT/toolgraph"
mkdir -p "$R"

# A pure stage: the walks of step 30, in batches of 2 graphs over the actors; the same chains as in one process.
astra-core ray --batch-size 2 astra-toolgraph walk "$TG/graphs.jsonl" --walks 16 --min-length 2 --max-length 4 \
  --acyclic --seed 0 -o "$R/walks.jsonl" --rejects "$R/walks.rejects.jsonl" 2> "$R/walks.log"
grep -A3 '^astra-toolgraph walk: read' "$R/walks.log"
# An LLM stage against the embedded model: step 30's tasks, each actor with its own client (--concurrency each).
astra-core ray --batch-size 2 astra-toolgraph tasks "$TG/tasks.input.jsonl" --servers "$TG/servers.jsonl" \
  --per-chain 1 --per-server 1 --temperature 0 --max-tokens 48 -o "$R/tasks.jsonl" --rejects "$R/tasks.rejects.jsonl" \
  2> "$R/tasks.log"
grep -A3 '^astra-toolgraph tasks: read' "$R/tasks.log"
python - "$TG" "$R" <<'PY'
import json, sys

def records(path):  # as a set, the times of their provenance steps aside
    rows = [json.loads(line) for line in open(path)]
    for row in rows:
        for step in row["meta"]["provenance"]:
            step.pop("time")
    return sorted(json.dumps(row, sort_keys=True) for row in rows)

tg, r = sys.argv[1:]
same = records(f"{r}/walks.jsonl") == records(f"{tg}/walks.jsonl")
print(f"  walks on Ray: {len(records(f'{r}/walks.jsonl'))} chains, "
      f"{'the same records as step 30 in one process' if same else 'NOT the records of step 30'}")
if not same:
    sys.exit(1)
ids = lambda path: sorted(json.loads(line)["meta"]["parent_id"] for line in open(path))
print(f"  tasks on Ray: {len(ids(f'{r}/tasks.jsonl'))} written for {len(set(ids(f'{r}/tasks.jsonl')))} inputs "
      f"(in one process: {len(ids(f'{tg}/tasks.jsonl'))}), "
      f"{sum(1 for _ in open(f'{r}/tasks.rejects.jsonl'))} rejected with a reason")
PY
