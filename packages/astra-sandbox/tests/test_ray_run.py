"""`astra-sandbox run` (an async stage with a warm jailed pool) on Ray Data (`astra-core ray`): each actor opens its
own pool of real nsjail workers, and the run writes the records, rejects and counts of one process.

Runs in-process on the session's local Ray (`local_ray`, astra_core.testing).
"""

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from astra_core.cli import main as core
from astra_core.testing import records_as_run, summary_of
from astra_sandbox.cli import main as sandbox
from click.testing import CliRunner

pytestmark = pytest.mark.nsjail

QUICK = ["--sandbox-wall-time-s", "2", "--sandbox-cpu-time-s", "2", "--sandbox-memory-mb", "256",
         "--sandbox-call-timeout-s", "1", "--sandbox-pool-size", "1"]


def requests(tmp_path):
    """Programs, and bad input: a request without code, a wrong-typed field, a path out of the program's directory
    (the stage's own Rejected), a program that runs past its time limit."""
    items = [{"id": f"r{n}", "code": f"print({n} * {n})"} for n in range(9)]
    items[2] = {"id": "no-code", "language": "python"}
    items[4] = {"id": "wrong-type", "code": "print(1)", "run_timeout": "soon"}
    items[6] = {"id": "escape", "code": "print(1)", "files": {"../x": base64.b64encode(b"x").decode()}}
    items.append({"id": "loop", "code": "while True:\n    pass", "run_timeout": 0.5})
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def without_timing(path):
    """The records, without the one field that differs between any two runs: how long a program took."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        (record.get("run_result") or {}).pop("execution_time", None)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return records_as_run(path)


def run_here(tmp_path) -> tuple[list[str], str]:
    """The requests run in one process (here.jsonl, here.rej.jsonl): (the command's arguments, its stderr)."""
    args = ["run", str(requests(tmp_path)), *QUICK, "--skip-bad"]
    here = CliRunner().invoke(sandbox, [*args, "-o", str(tmp_path / "here.jsonl"),
                                        "--rejects", str(tmp_path / "here.rej.jsonl")])
    assert here.exit_code == 0, here.output
    return args, here.stderr


def assert_as_in_one_process(tmp_path, here: str, there: str) -> list[str]:
    """The run on Ray wrote and said what the run in one process did; its summary."""
    assert without_timing(tmp_path / "ray.jsonl") == without_timing(tmp_path / "here.jsonl")
    assert records_as_run(tmp_path / "ray.rej.jsonl") == records_as_run(tmp_path / "here.rej.jsonl")
    summary = summary_of(there, "astra-sandbox run")
    assert summary == summary_of(here, "astra-sandbox run")
    return summary


def test_sandbox_run_on_ray_writes_the_records_rejects_and_counts_of_one_process(tmp_path, local_ray):
    args, here = run_here(tmp_path)
    there = CliRunner().invoke(core, ["ray", "--actors", "2", "--batch-size", "3", "astra-sandbox", *args,
                                      "-o", str(tmp_path / "ray.jsonl"), "--rejects", str(tmp_path / "ray.rej.jsonl")])
    assert there.exit_code == 0, there.output
    summary = assert_as_in_one_process(tmp_path, here, there.stderr)
    # the figures the stage keeps (stage.stats) add up over the actors' batches
    assert "  result Success/Finished: 6" in summary and "  result Failed/TimeLimitExceeded: 1" in summary
    assert "rejected 3" in summary[0]


@pytest.mark.slow
def test_sandbox_run_on_a_cluster_of_two_nodes_writes_what_one_process_writes(tmp_path, ray_cluster):
    args, here = run_here(tmp_path)
    there = ray_cluster.run("--batch-size", "3", "astra-sandbox", *args, "-o", tmp_path / "ray.jsonl",
                            "--rejects", tmp_path / "ray.rej.jsonl")
    assert there.returncode == 0, there.stderr
    assert_as_in_one_process(tmp_path, here, there.stderr)
    assert "on 2 nodes" in there.stderr


@pytest.mark.slow
def test_a_node_lost_in_the_middle_of_a_run_loses_no_record(tmp_path, ray_cluster):
    """The second node's raylet is killed (its actors and their pools die with it) once records are written: the
    batches it held run again elsewhere, and every record is written once."""
    items = [{"id": f"r{n}", "code": f"import time\ntime.sleep(0.6)\nprint({n})"} for n in range(16)]
    path = tmp_path / "slow.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    out = tmp_path / "out.jsonl"
    command = [str(Path(sys.executable).with_name("astra-core")), "ray", "--address", ray_cluster.address, "--batch-size", "2",
               "astra-sandbox", "run", str(path), *QUICK, "-o", str(out)]
    process = subprocess.Popen(command, env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out.exists() and out.read_text().count("\n") >= 3):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.1)
        os.kill(ray_cluster.worker_raylet(), signal.SIGKILL)
        written_before = out.read_text().count("\n")
        _, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
        ray_cluster.add_node()  # (two nodes again for the session's other tests)
    assert process.returncode == 0, stderr
    written = sorted(json.loads(line)["id"] for line in out.read_text().splitlines())
    assert written == sorted(item["id"] for item in items)
    assert "read 16 · wrote 16 from 16 · rejected 0" in stderr
    assert written_before < 16  # (the node was lost during the run)
