"""`astra-reward judge-trajectory` (an async LLM stage) on Ray Data (`astra-core ray`) writes what it writes in one
process, and keeps its --concurrency in each actor.

Judge replies are recorded and served by a real loopback HTTP server (`recorded_llm`): the runs differ in where the
records are judged, not in what the judge says (replies are routed by the question a request asks, whatever the
order). Runs in-process on the session's local Ray (`local_ray`).
"""

import json
import time

import pytest
from astra_core.cli import main as core
from astra_core.testing import records_as_run, summary_of
from astra_reward.bundled import data_path
from astra_reward.cli import main as reward
from click.testing import CliRunner
from judge_replies import router
from test_cli_judges import GOOD_TRAJECTORY

COMMAND = "astra-reward judge-trajectory"


def trajectories(tmp_path, copies: int):
    """The bundled good and sloppy trajectories under new ids, and bad lines: no JSON, a wrong-typed field."""
    bundled = [json.loads(line) for line in (data_path() / "trajectories.jsonl").read_text().splitlines()]
    lines = [json.dumps({**bundled[i % 2], "id": f"{bundled[i % 2]['id']}-{i}"}) for i in range(copies)]
    lines[2] = "{not json"
    lines[5] = json.dumps({**bundled[0], "id": "wrong-type", "messages": "hello"})
    path = tmp_path / "trajectories.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def judge_args(server, path, out, rejects, *more):
    return [COMMAND.split()[1], str(path), "--base-url", server.base_url, "--max-retries", "0", "--min-score", "0.9",
            "--skip-bad", "-o", str(out), "--rejects", str(rejects), *more]


def judged_here(server, tmp_path):
    """Bad input and judged trajectories, judged in one process (here.jsonl, here.rej.jsonl): (the input, stderr)."""
    path = trajectories(tmp_path, 14)
    here = CliRunner().invoke(reward, judge_args(server, path, tmp_path / "here.jsonl", tmp_path / "here.rej.jsonl"))
    assert here.exit_code == 0, here.output
    return path, here.stderr


def assert_as_in_one_process(tmp_path, here: str, there: str) -> None:
    assert records_as_run(tmp_path / "ray.jsonl") == records_as_run(tmp_path / "here.jsonl")
    assert records_as_run(tmp_path / "ray.rej.jsonl") == records_as_run(tmp_path / "here.rej.jsonl")
    assert summary_of(there, COMMAND) == summary_of(here, COMMAND)  # (the llm: usage line too)


def test_judge_trajectory_on_ray_writes_the_records_rejects_and_counts_of_one_process(recorded_llm, tmp_path,
                                                                                       local_ray):
    server = recorded_llm(replies=[router(GOOD_TRAJECTORY)])
    path, here = judged_here(server, tmp_path)
    there = CliRunner().invoke(core, ["ray", "--actors", "2", "--batch-size", "3", "astra-reward",
                                      *judge_args(server, path, tmp_path / "ray.jsonl", tmp_path / "ray.rej.jsonl",
                                                  "--concurrency", "2")])
    assert there.exit_code == 0, there.output
    assert_as_in_one_process(tmp_path, here, there.stderr)
    assert "wrote 6 from 6 · rejected 8" in there.stderr and "malformed ×2" in there.stderr
    assert "ray: 2 actors (1 CPU each, 2 in flight each, 2 batches at a time)" in there.stderr


def test_an_async_stage_keeps_its_concurrency_in_each_actor(recorded_llm, tmp_path, local_ray):
    reply = router(GOOD_TRAJECTORY)

    def slow(body):
        time.sleep(0.3)
        return reply(body)

    server = recorded_llm(replies=[slow])
    path = trajectories(tmp_path, 7)
    there = CliRunner().invoke(core, ["ray", "--actors", "1", "astra-reward",
                                      *judge_args(server, path, tmp_path / "ray.jsonl", tmp_path / "ray.rej.jsonl",
                                                  "--concurrency", "4")])
    assert there.exit_code == 0, there.output
    assert server.max_in_flight == 4  # one actor, 4 requests in flight: its client's, as in one process


@pytest.mark.slow
def test_judge_trajectory_on_a_cluster_of_two_nodes_writes_what_one_process_writes(recorded_llm, tmp_path,
                                                                                   ray_cluster):
    server = recorded_llm(replies=[router(GOOD_TRAJECTORY)])
    path, here = judged_here(server, tmp_path)
    there = ray_cluster.run("--batch-size", "3", "astra-reward",
                            *judge_args(server, path, tmp_path / "ray.jsonl", tmp_path / "ray.rej.jsonl"))
    assert there.returncode == 0, there.stderr
    assert_as_in_one_process(tmp_path, here, there.stderr)
    assert "ray: 2 actors" in there.stderr and "on 2 nodes" in there.stderr
