# astra-toolgraph: tool documents -> servers -> chains -> graph -> walks -> verified chains -> tasks
# -> scored tasks -> trajectories (real MCP calls + emulated calls) -> statistics (paper §2.1).
# Live servers: mcp-server-sqlite (uvx), @modelcontextprotocol/server-filesystem (npm), mcp-server-time.
# The embedded model is tiny: expect few usable LLM chains and odd tasks; every drop lands in a
# *.rejects.jsonl file with its reason.
TG="$OUT/toolgraph"
mkdir -p "$TG/files" "$TG/plots"
printf 'buy milk\ncall Ana about the offsite\n' > "$TG/files/todo.txt"
rm -f "$TG/shop.db"
LLM=(--temperature 0 --max-tokens 48)

# 1. Sources: the bundled documents (ASTRA mcp_servers.jsonl, OpenAI, BFCL, OpenAPI) and three live servers
#    (the filesystem server exposes 4 of its 14 tools: every tool schema is in every prompt of the tiny model).
astra-toolgraph samples > "$TG/sources.jsonl"
cat >> "$TG/sources.jsonl" <<EOF
{"name": "sqlite", "domain": "databases", "description": "Query and modify a SQLite database.", "command": "uvx", "args": ["--with", "mcp>=1.6,<2", "mcp-server-sqlite", "--db-path", "$TG/shop.db"]}
{"name": "filesystem", "domain": "files", "description": "Read and write files in one directory.", "command": "$PWD/node_modules/.bin/mcp-server-filesystem", "args": ["$TG/files"], "include_tools": ["list_directory", "read_text_file", "write_file", "get_file_info"]}
{"name": "time", "command": "mcp-server-time"}
EOF
astra-toolgraph normalize "$TG/sources.jsonl" -o "$TG/servers.all.jsonl" --server-log "$TG/mcp-servers.log"
astra-toolgraph filter "$TG/servers.all.jsonl" -o "$TG/servers.jsonl" --rejects "$TG/servers.rejects.jsonl"
python -c "import json,sys; [print(' rejected', r['id'] + ':', r['reason']) for r in map(json.loads, open(sys.argv[1]))]" \
  "$TG/servers.rejects.jsonl"

# 2. Chains: LLM (task, chain) synthesis for one doc-only server; graph = chain pair counts + schema edges.
grep '"id":"order-desk"' "$TG/servers.jsonl" > "$TG/order-desk.jsonl"
astra-toolgraph synthesize-chains "$TG/order-desk.jsonl" -o "$TG/chains.llm.jsonl" \
  --rejects "$TG/chains.llm.rejects.jsonl" --temperature 0 --max-tokens 64
astra-toolgraph graph "$TG/servers.jsonl" --chains "$TG/chains.llm.jsonl" -o "$TG/graphs.jsonl" \
  --rejects "$TG/graphs.rejects.jsonl"
astra-toolgraph walk "$TG/graphs.jsonl" --walks 16 --min-length 2 --max-length 4 --acyclic --seed 0 \
  -o "$TG/walks.jsonl"

# 3. Verification: the LLM-free dependency check on every walk; coherence (LLM back-translation) on one.
astra-toolgraph verify-chains "$TG/walks.jsonl" --servers "$TG/servers.jsonl" --no-coherence \
  -o "$TG/chains.verified.jsonl" --rejects "$TG/chains.verified.rejects.jsonl"
head -n 1 "$TG/chains.verified.jsonl" | astra-toolgraph verify-chains --servers "$TG/servers.jsonl" --attempts 1 \
  -o "$TG/chains.coherent.jsonl" --rejects "$TG/chains.coherent.rejects.jsonl" "${LLM[@]}"

# 4. Tasks: chain-conditioned (one verified chain of sqlite, filesystem and order-desk) and server-only (calendar).
python - "$TG" <<'PY'
import json, sys
tg = sys.argv[1]
chains = {}
for line in open(f"{tg}/chains.verified.jsonl"):
    chain = json.loads(line)
    if chain["server_id"] in ("sqlite", "filesystem", "order-desk") and len(chain["tools"]) >= 2:
        chains.setdefault(chain["server_id"], line)
servers = [line for line in open(f"{tg}/servers.jsonl") if json.loads(line)["id"] == "calendar"]
open(f"{tg}/tasks.input.jsonl", "w").writelines([*chains.values(), *servers])
PY
astra-toolgraph tasks "$TG/tasks.input.jsonl" --servers "$TG/servers.jsonl" --per-chain 1 --per-server 1 \
  -o "$TG/tasks.jsonl" --rejects "$TG/tasks.rejects.jsonl" "${LLM[@]}"
head -n 1 "$TG/tasks.jsonl" | astra-toolgraph augment --attempts 1 -o "$TG/tasks.augmented.jsonl" "${LLM[@]}"
cat "$TG/tasks.jsonl" <(tail -n +2 "$TG/tasks.augmented.jsonl") > "$TG/tasks.all.jsonl"

# 5. Scoring: astra-reward's task judge with thresholds (paper Eq. 1). Only accepted tasks are rolled out; the
#    tiny judge's ratings are poor, and when it accepts none the demo says so and rolls out the package's
#    bundled hand-written tasks instead (each says so in meta.sample), never the rejected ones.
astra-reward judge-task "$TG/tasks.all.jsonl" --servers "$TG/servers.jsonl" --min-score 0.6 --attempts 1 \
  -o "$TG/tasks.scored.jsonl" --rejects "$TG/tasks.scored.rejects.jsonl" "${LLM[@]}"
if [ -s "$TG/tasks.scored.jsonl" ]; then
  cp "$TG/tasks.scored.jsonl" "$TG/tasks.rollout.jsonl"
else
  echo "the judge accepted no synthesized task: rolling out the bundled sample tasks (astra-toolgraph samples --what tasks)"
  astra-toolgraph samples --what tasks > "$TG/tasks.rollout.jsonl"
fi

# 6. Trajectories: real calls on sqlite/filesystem, the stateful emulator (20% injected failures) elsewhere.
astra-toolgraph rollout "$TG/tasks.rollout.jsonl" --servers "$TG/servers.jsonl" --tool-choice first-required \
  --max-turns 3 --emulator-failure-rate 0.2 --emulator-max-tokens 48 --server-log "$TG/mcp-servers.log" \
  -o "$TG/trajectories.jsonl" --rejects "$TG/trajectories.rejects.jsonl" --temperature 0 --max-tokens 24
python - "$TG/trajectories.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    for e in t["meta"]["rollout"]["executions"]:
        note = " (injected)" if e["injected_failure"] else ""
        print(f" {t['meta']['rollout']['server_id']:12} {e['backend']:8} {e['tool']:22} {e['kind']}{note}")
PY

# 7. Dataset statistics: a table and the paper's figures as PNGs.
astra-toolgraph stats "$TG/trajectories.jsonl" --plots "$TG/plots" | tee "$TG/stats.txt"
