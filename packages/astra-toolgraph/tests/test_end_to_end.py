"""The whole path on real servers with the embedded local model (SmolLM2): MCP servers started over
stdio, normalized, filtered (mcp-server-time rejected), graphed, walked, verified, tasks written by
the model, trajectories rolled out with real calls. Quality is not the point (a 135M model); the path is.

The default run uses mcp-server-sqlite alone; the slow run adds @modelcontextprotocol/server-filesystem."""

import json

import pytest
from toolgraph_helpers import filesystem_source, invoke, read_jsonl, sqlite_source, time_source, write_jsonl


def run_pipeline(tmp_path, sources: list[dict], servers: set[str]) -> list[dict]:
    log = tmp_path / "servers.log"
    p = {name: tmp_path / f"{name}.jsonl" for name in ("sources", "servers", "kept", "rejects", "graphs", "walks",
                                                       "verified", "picked", "tasks", "task_rejects", "trajectories")}
    write_jsonl(p["sources"], [*sources, time_source()])
    invoke("normalize", p["sources"], "-o", p["servers"], "--server-log", log)
    invoke("filter", p["servers"], "-o", p["kept"], "--rejects", p["rejects"])
    assert [(r["id"], r["reason"].split(":")[0]) for r in read_jsonl(p["rejects"])] == [("time", "fewer than 3 tools")]
    invoke("graph", p["kept"], "-o", p["graphs"])
    invoke("walk", p["graphs"], "--walks", 8, "--max-length", 3, "--seed", 1, "-o", p["walks"])
    invoke("verify-chains", p["walks"], "--servers", p["kept"], "--no-coherence", "-o", p["verified"])
    first_per_server = {c["server_id"]: c for c in reversed(read_jsonl(p["verified"]))}
    assert set(first_per_server) == servers
    # Chain-conditioned and server-only construction in one call (inputs may mix tool_chain and tool_server).
    write_jsonl(p["picked"], [*first_per_server.values(), *read_jsonl(p["kept"])])

    invoke("tasks", p["picked"], "--servers", p["kept"], "--per-server", 1, "-o", p["tasks"], "--max-tokens", 32,
           "--temperature", 0, "--rejects", p["task_rejects"])
    tasks = read_jsonl(p["tasks"])
    # The tiny model may write no usable request for an input: it is rejected with the reply, never lost.
    assert len({t["meta"]["parent_id"] for t in tasks}) + len(read_jsonl(p["task_rejects"])) == 2 * len(servers)
    assert all(t["origin"] in ("chain", "server") and t["question"] and t["server_id"] in servers for t in tasks)
    tasks = list({t["server_id"]: t for t in reversed(tasks)}.values())  # one rollout per server keeps it small
    assert {t["server_id"] for t in tasks} == servers
    write_jsonl(p["tasks"], tasks)

    invoke("rollout", p["tasks"], "--servers", p["kept"], "-o", p["trajectories"], "--tool-choice", "first-required",
           "--max-turns", 2, "--max-tokens", 16, "--temperature", 0, "--server-log", log)
    trajectories = read_jsonl(p["trajectories"])
    assert len(trajectories) == len(tasks)
    for trajectory in trajectories:
        meta = trajectory["meta"]["rollout"]
        assert meta["backend"] == "mcp" and meta["tool_choice"]["forced_turns"][0] == 0
        first_call = trajectory["messages"][2]["tool_calls"][0]
        execution = meta["executions"][0]
        assert execution["backend"] == "mcp" and execution["call_id"] == first_call["id"]
        observation = next(m for m in trajectory["messages"] if m.get("tool_call_id") == first_call["id"])
        assert observation["content"]  # answered by the real server (a result or its own error message)
    summary = json.loads(invoke("stats", p["trajectories"], "--json").stdout)
    assert summary["samples"] == len(trajectories) and summary["tool_calls"] >= len(trajectories)
    return trajectories


@pytest.mark.llm
def test_pipeline_on_a_real_sqlite_server_with_the_embedded_model(llm_env, tmp_path):
    run_pipeline(tmp_path, [sqlite_source(tmp_path / "shop.db")], {"sqlite"})


@pytest.mark.llm
@pytest.mark.slow
def test_pipeline_on_real_sqlite_and_filesystem_servers_with_the_embedded_model(llm_env, tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "notes.txt").write_text("buy milk\ncall Ana\n")
    # The filesystem server exposes four of its tools here: every tool schema is in the prompt of every turn,
    # and the embedded model runs on a shared 2-core CPU.
    filesystem = filesystem_source(files, tools=["list_directory", "read_text_file", "write_file", "get_file_info"])
    trajectories = run_pipeline(tmp_path, [sqlite_source(tmp_path / "shop.db"), filesystem], {"sqlite", "filesystem"})
    assert {t["meta"]["rollout"]["server_id"] for t in trajectories} <= {"sqlite", "filesystem"}
