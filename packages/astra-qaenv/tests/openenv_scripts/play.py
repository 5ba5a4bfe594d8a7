"""Play episodes against an OpenEnv server with OpenEnv's own client (`MCPToolClient`), as any trainer would.

    python play.py BASE_URL PLANS.jsonl OUT.jsonl [--threads N | --together]

A plan: {"reset": {...}, "calls": [{"name", "arguments", "via": "mcp" | "step"}], "answer": str | null,
"finish": true}. "mcp" calls go over HTTP /mcp (`call_tool`), "step" ones over /ws (`step(CallToolAction)`); the
episode ends with a step of `Action(metadata={"answer": ...})`. One line out per plan, in order: what the client
saw (the reset observation's metadata, each call's observation text, the final reward, done and metadata), or the
error that ended it. --together: every plan's session is opened at once, each waiting for the others' reset before
going on. Runs under .venv-openenv (the tests' openenv_support).
"""

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action
from openenv.core.mcp_client import MCPToolClient


def observation_text(client, call: dict) -> str:
    if call.get("via") == "step":
        observation = client.step(CallToolAction(tool_name=call["name"], arguments=call["arguments"])).observation
        return observation.error.message if observation.error else observation.result["data"]
    try:
        return client.call_tool(call["name"], **call["arguments"])
    except RuntimeError as exc:  # MCPToolClient raises "Tool 'NAME' failed: MESSAGE" for an error result
        return str(exc).split(" failed: ", 1)[1]


def play(base_url: str, plan: dict, together: threading.Barrier | None = None) -> dict:
    client = MCPToolClient(base_url=base_url).sync()
    try:
        try:
            client.connect()
            reset = client.reset(**plan.get("reset", {}))
        finally:
            if together is not None:  # every session is open (or refused) before any goes on
                together.wait(timeout=60)
        out = {"reset": reset.observation.metadata, "tools": sorted(t.name for t in client.list_tools()),
               "observations": [observation_text(client, call) for call in plan["calls"]]}
        if plan.get("finish", True):
            end = client.step(Action(metadata={} if plan.get("answer") is None else {"answer": plan["answer"]}))
            out.update(reward=end.reward, done=end.done, metadata=end.observation.metadata)
        return out
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        client.close()


def main() -> None:
    base_url, plans_path, out_path = sys.argv[1:4]
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
    plans = [json.loads(line) for line in open(plans_path) if line.strip()]
    together = threading.Barrier(len(plans)) if "--together" in sys.argv else None
    with ThreadPoolExecutor(max_workers=len(plans) if together else threads) as pool:
        results = list(pool.map(lambda plan: play(base_url, plan, together), plans))
    with open(out_path, "w") as handle:
        for result in results:
            handle.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
