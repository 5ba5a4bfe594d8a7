"""The judge's endpoint dies in the middle of a run (a real server process, killed with requests in flight).

Replies are recorded (astra_core.testing's RecordedLLM over real HTTP): the test is about control flow. Before,
every record after the outage was rejected ("error: LLMError ... Cannot connect"), and `--resume` then skipped
them as done: an outage silently lost them. Now the stage stops, keeps what it finished, and --resume does the rest.
"""

import json
import os
import subprocess
import sys
import time

from astra_core.formats_doc import example

SERVER = """
import json, os, sys, time
from astra_core.testing import RecordedLLM

left = [int(sys.argv[1])]

def reply(body):
    left[0] -= 1
    if left[0] < 0:
        os._exit(0)  # the endpoint dies mid-run
    return json.dumps({"reason": "recorded", "score": 1})

print(RecordedLLM(replies=[reply]).start().base_url, flush=True)
time.sleep(600)
"""
JUDGE = os.path.join(os.path.dirname(sys.executable), "astra-reward")


def serve(replies: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(replies)], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


def judge(base_url: str, records, out, rejects, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([JUDGE, "judge-trajectory", str(records), "-o", str(out), "--rejects", str(rejects),
                           "--base-url", base_url, "--model", "recorded", "--concurrency", "2", "--max-retries", "1",
                           *more], capture_output=True, text=True, timeout=120)


def test_an_endpoint_that_dies_mid_run_stops_the_stage_and_resume_does_the_rest(tmp_path):
    base = example("trajectory")
    records = tmp_path / "trajectories.jsonl"
    records.write_text("".join(json.dumps({**base, "id": f"t{i}", "messages": [  # 4 judgments each: QU, QP, Corr, Summ
        {"role": "user", "content": f"What is {i} + {i}?"}, {"role": "assistant", "content": str(2 * i)}]}) + "\n"
        for i in range(30)))
    out, rejects = tmp_path / "judged.jsonl", tmp_path / "rejects.jsonl"

    dying, url = serve(replies=40)
    try:
        stopped = judge(url, records, out, rejects)
    finally:
        dying.kill()
        dying.wait()
    assert stopped.returncode == 1, stopped.stderr
    assert "the endpoint does not answer" in stopped.stderr and "Traceback" not in stopped.stderr
    assert "read records not finished (rerun with the same -o and --rejects and --resume" in stopped.stderr
    done = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert 0 < len(done) < 30
    assert not rejects.exists() or rejects.read_text() == ""  # nothing was rejected for the endpoint's sake

    alive, url = serve(replies=10_000)
    try:
        resumed = judge(url, records, out, rejects, "--resume")
    finally:
        alive.kill()
        alive.wait()
    assert resumed.returncode == 0, resumed.stderr
    judged = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in judged) == sorted(f"t{i}" for i in range(30))
    assert all(r["scores"]["overall"] == 1.0 for r in judged)


def slow_reply(body):
    time.sleep(0.05)  # slow enough that a SIGTERM lands with requests in flight
    return json.dumps({"reason": "recorded", "score": 1})


def test_sigterm_mid_run_keeps_what_the_stage_finished_and_resume_does_the_rest(tmp_path, recorded_llm):
    """A scheduler's time limit ends a judge run (SIGTERM while requests are in flight on the event loop): the
    stage says what it did and what is left, exit 143; `--resume` judges exactly the rest."""
    import signal

    base = example("trajectory")
    records = tmp_path / "trajectories.jsonl"
    records.write_text("".join(json.dumps({**base, "id": f"t{i}", "messages": [
        {"role": "user", "content": f"What is {i} + {i}?"}, {"role": "assistant", "content": str(2 * i)}]}) + "\n"
        for i in range(200)))
    out, rejects = tmp_path / "judged.jsonl", tmp_path / "rejects.jsonl"
    server = recorded_llm(replies=[slow_reply])
    argv = [JUDGE, "judge-trajectory", str(records), "-o", str(out), "--rejects", str(rejects),
            "--base-url", server.base_url, "--model", "recorded", "--concurrency", "4"]
    with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True) as run:
        deadline = time.monotonic() + 60
        while (not out.exists() or out.read_text().count("\n") < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        err = run.stderr.read()
    assert run.returncode == 143, err
    assert "terminated (SIGTERM): " in err and "--resume to do only what is left" in err
    assert "Traceback" not in err
    done = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert 3 <= len(done) < 200
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    judged = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(judged) == sorted(f"t{i}" for i in range(200))
