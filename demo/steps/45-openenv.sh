# OpenEnv both ways: one qaenv environment served as an OpenEnv MCP environment (astra-qaenv serve-openenv: a
# sandbox episode per session, the sample's tools over MCP, our F1 at the episode's end) and one episode of it played
# through OpenEnv's client by astra-grpo rollout (the embedded SmolLM2 as the policy, the environment's reward).
# OpenEnv needs the mcp SDK 1.x and the workspace's MCP servers 2.x: both commands run from .venv-openenv.
O="$OUT/openenv"
OPENENV="$PWD/.venv-openenv/bin"
mkdir -p "$O" && rm -f "$O/port"
head -1 "$OUT/qaenv/rl_samples.jsonl" > "$O/served.jsonl"
"$OPENENV/astra-qaenv" serve-openenv "$O/served.jsonl" --port 0 --port-file "$O/port" --sandbox-pool-size 1 \
  2> "$O/server.log" & openenv_server=$!
background_pids+=("$openenv_server")
until [ -s "$O/port" ]; do kill -0 "$openenv_server" 2> /dev/null || { cat "$O/server.log"; exit 1; }; sleep 0.2; done
head -1 "$O/server.log"

# The sample as any OpenEnv environment is named in an rl_sample: its server, the reset arguments, a closing step
# with the final answer (where serve-openenv scores), and the environment's own reward.
python - "$O" "http://127.0.0.1:$(cat "$O/port")" <<'PY'
import json, sys
out, url = sys.argv[1:]
sample = json.loads(open(f"{out}/served.jsonl").readline())
sample["environment"] = {"openenv": {"base_url": url, "reset": {"sample_id": sample["id"]}, "finish": True}}
sample["reward"] = {"kind": "openenv"}
open(f"{out}/remote.jsonl", "w").write(json.dumps(sample) + "\n")
PY
MODEL_DIR="$(python -c 'from astra_core.local.model import resolve_model_path; print(resolve_model_path(None))')"
"$OPENENV/astra-grpo" rollout "$O/remote.jsonl" --model "$MODEL_DIR" -n 1 --max-turns 3 --max-new-tokens 48 \
  --max-response-length 1024 --sandbox-pool-size 1 -o "$O/rollouts.jsonl" --rejects "$O/rejects.jsonl"
kill "$openenv_server"; wait "$openenv_server" 2> /dev/null || true

python - "$O" <<'PY'
import json, sys
from astra_reward import f1_reward
out = sys.argv[1]
sample = json.loads(open(f"{out}/served.jsonl").readline())
[episode] = [json.loads(line) for line in open(f"{out}/rollouts.jsonl")]
served = episode["reward_components"].get("closing", {}).get("reward_components")
here = f1_reward(sample["job"], episode["messages"])
print(f"openenv: {sample['id']} played over OpenEnv: {episode['num_tool_calls']} tool call(s), {episode['finish_reason']}")
print(f"openenv:   the server's reward {episode['reward']} ({served}); F1 of the same conversation here {here.reward}")
assert episode["finish_reason"] == "error" or episode["reward"] == here.reward, "the served reward is not ours"
PY
