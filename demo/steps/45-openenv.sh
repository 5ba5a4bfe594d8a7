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

# An environment OpenEnv itself publishes: the echo environment `openenv init` writes, served as its README says. It
# is no MCP environment, so the policy only answers: the reset's greeting reaches the prompt through the sample's
# `task` template, the answer reaches the server as its own action (`finish: "message"`), and the server scores it
# by its own formula (min(0.1 x length, 1)). Every sample is checked against the server's /schema first.
"$OPENENV/openenv" init echo_env -o "$O" > /dev/null
echo_port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
(cd "$O/echo_env" && exec "$OPENENV/python" -m uvicorn server.app:app --host 127.0.0.1 --port "$echo_port") \
  2> "$O/echo.log" & echo_server=$!
background_pids+=("$echo_server")
until python -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
  "http://127.0.0.1:$echo_port/health" 2> /dev/null; do
  kill -0 "$echo_server" 2> /dev/null || { cat "$O/echo.log"; exit 1; }; sleep 0.2
done
python - "$O" "http://127.0.0.1:$echo_port" <<'PY'
import json, sys
out, url = sys.argv[1:]
sample = {"id": "echo", "messages": [{"role": "user", "content": "Reply to the server in one short sentence."}],
          "tools": [], "reward": {"kind": "openenv"}, "meta": {"provenance": []},
          "environment": {"openenv": {"base_url": url, "task": "The server says: {{ echoed_message }}",
                                      "finish": "message"}}}
open(f"{out}/echo.jsonl", "w").write(json.dumps(sample) + "\n")
PY
"$OPENENV/astra-grpo" rollout "$O/echo.jsonl" --model "$MODEL_DIR" -n 2 --max-turns 1 --max-new-tokens 32 \
  --max-response-length 256 --sandbox-pool-size 1 -o "$O/echo_rollouts.jsonl" --rejects "$O/echo_rejects.jsonl"
kill "$echo_server"; wait "$echo_server" 2> /dev/null || true

python - "$O" <<'PY'
import json, sys
out = sys.argv[1]
for episode in (json.loads(line) for line in open(f"{out}/echo_rollouts.jsonl")):
    prompt = next(m["content"] for m in episode["messages"] if m["role"] == "user")
    closing = episode["reward_components"].get("closing") or {}
    print(f"openenv: echo_env (openenv init) episode {episode['member']}: the prompt ends {prompt.splitlines()[-1]!r}")
    print(f"openenv:   the server echoed {closing.get('echoed_message', '')[:60]!r} and gave reward {episode['reward']}")
    assert episode["finish_reason"] == "error" or prompt.endswith("Echo Env environment ready!"), "no task in the prompt"
    assert episode["finish_reason"] == "error" or abs(episode["reward"] - min(0.1 * closing["message_length"], 1.0)) < 1e-9
PY
