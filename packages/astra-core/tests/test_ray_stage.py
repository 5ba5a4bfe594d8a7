"""astra_core.ray_stage: what a Ray run does when its workers die, and what it says without the `ray` extra.

Stages of other packages on Ray are tested in their packages (test_ray_*.py: walk, judge-trajectory, sandbox run,
export). Here two stages declared in this file probe the runner: one whose worker process dies at a poisoned record
(as at an out-of-memory kill or a crash in native code), one slow enough to kill a worker in the middle of its run.
Runs in-process on the session's local Ray (`local_ray`, astra_core.testing).
"""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from astra_core.command import stage_command, stage_runner
from astra_core.config import knob
from astra_core.ray_stage import RayOptions, runner
from click.testing import CliRunner


@click.group("probes")
def probes() -> None:
    """Stages that probe the Ray runner."""


def crash_at_poison(record: dict) -> dict:
    """Its worker process dies at a record marked `poison`, each time it runs it."""
    if record.get("poison"):
        os._exit(1)
    return {**record, "seen": True}


@dataclass
class Slow:
    seconds: float = knob(0.5, "Seconds each record takes.")


async def slowly(record: dict, config: Slow) -> dict:
    await asyncio.sleep(config.seconds)
    return {**record, "seen": True}


@dataclass
class Marks:
    marks: str = knob("", "Directory where the resource marks its opening and closing.")


@contextlib.contextmanager
def marked(config: Marks):
    """A resource that leaves a file when it opens and another when it closes."""
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    Path(config.marks, f"opened-{tag}").touch()
    try:
        yield tag
    finally:
        Path(config.marks, f"closed-{tag}").touch()


def tagged(record: dict, mark: str) -> dict:
    return {**record, "by": mark}


stage_command(probes, "crash")(crash_at_poison)
stage_command(probes, "slowly", config=Slow, concurrency=2)(slowly)
stage_command(probes, "marked", config=Marks, uses={"mark": marked})(tagged)


@pytest.fixture(scope="module")
def on_ray(local_ray):
    """Invoke a probe stage as `astra-core ray` runs one (its runner set), with these Ray options."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (workers cannot import a test module)

    def invoke(options: RayOptions, *args: str):
        token = stage_runner.set(runner(options))
        try:
            return CliRunner().invoke(probes, [str(a) for a in args])
        finally:
            stage_runner.reset(token)

    return invoke


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_record_that_kills_its_worker_every_time_ends_in_the_rejects_with_the_reason(tmp_path, on_ray):
    records = [{"id": f"r{n}"} for n in range(6)]
    records[3]["poison"] = True
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out, rejects = tmp_path / "out.jsonl", tmp_path / "rejects.jsonl"
    done = on_ray(RayOptions(actors=1, batch_size=6, worker_deaths=1), "crash", path, "-o", out, "--rejects", rejects)
    assert done.exit_code == 3, done.output  # (an internal error: as in one process, exit 3)
    assert sorted(r["id"] for r in read(out)) == ["r0", "r1", "r2", "r4", "r5"]  # each once
    [lost] = read(rejects)
    assert lost["id"] == "r3" and lost["source"] == f"{path}:4" and lost["record"] == records[3]
    assert lost["reason"].startswith("error: WorkerLost: its Ray worker died each of the 1 times it ran this record "
                                     "alone")
    assert "read 6 · wrote 5 from 5 · rejected 1 (1 error)" in done.stderr


def _stage_workers() -> list[int]:
    """Processes of the actors that run stage batches (Ray names them after the class)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if command.startswith(b"ray::") and b"MapWorker" in command:  # (ray 2.60: MapWorker(MapBatches(StageWorker)))
            found.append(int(entry.name))
    return found


def test_a_worker_killed_in_the_middle_of_a_run_loses_no_record(tmp_path, on_ray):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{n}"}) + "\n" for n in range(32)))
    out = tmp_path / "out.jsonl"
    killed: list[int] = []

    def kill_one_worker_once_records_are_written() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            workers = _stage_workers()
            if workers and out.exists() and out.read_text().count("\n") >= 4:
                os.kill(workers[0], signal.SIGKILL)
                killed.append(workers[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_worker_once_records_are_written, daemon=True)
    killer.start()
    done = on_ray(RayOptions(actors=2, batch_size=4), "slowly", path, "--seconds", "0.5", "-o", out)
    killer.join()
    assert killed, "no worker was running to kill"
    assert done.exit_code == 0, done.output
    written = [r["id"] for r in read(out)]
    assert sorted(written) == sorted(f"r{n}" for n in range(32))  # every record, each once
    assert "read 32 · wrote 32 from 32 · rejected 0" in done.stderr


def test_resources_open_once_per_actor_not_per_batch_and_close_when_it_ends(tmp_path, on_ray):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{n}"}) + "\n" for n in range(12)))
    marks = tmp_path / "marks"
    marks.mkdir()
    done = on_ray(RayOptions(actors=2, batch_size=2), "marked", path, "--marks", marks, "-o", tmp_path / "out.jsonl")
    assert done.exit_code == 0, done.output
    by = {record["by"] for record in read(tmp_path / "out.jsonl")}
    opened = {mark.name.removeprefix("opened-") for mark in marks.glob("opened-*")}
    assert by == opened and len(opened) == 2  # 6 batches, 2 actors: each opened its resource once
    deadline = time.monotonic() + 60  # (Ray Data ends its actors once the run is done: they close then)
    while {mark.name.removeprefix("closed-") for mark in marks.glob("closed-*")} != opened:
        assert time.monotonic() < deadline, "an actor's resource was not closed"
        time.sleep(0.2)


NOISY = """
import sys

import click
from astra_core.command import stage_command, stage_runner
from astra_core.ray_stage import RayOptions, runner


@click.group("probes")
def probes():
    pass


def noisy(record):
    print("noise from", record["id"])  # (as a library that prints would)
    return record


stage_command(probes, "noisy")(noisy)
stage_runner.set(runner(RayOptions(actors=1, batch_size=2)))
probes.main(["noisy", sys.argv[1]], prog_name="probes")
"""


def test_what_a_stage_prints_on_a_worker_does_not_mix_into_the_records_on_stdout(tmp_path):
    """Ray forwards an actor's stdout to the driver's stdout, where a stage writes its records without -o. (A run in
    its own process, with a Ray of its own: in this one Ray forwards to the terminal, not to the test's capture.)"""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{n}"}) + "\n" for n in range(6)))
    done = subprocess.run([sys.executable, "-c", NOISY, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(line)["id"] for line in done.stdout.splitlines()) == [f"r{n}" for n in range(6)]
    assert "noise from r" in done.stderr  # (said where messages go)


NO_RAY = """
import sys


class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoRay())
from astra_core.cli import main

main()
"""


def test_without_the_extra_astra_core_ray_says_in_one_line_what_to_install(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "r0"}\n')
    result = subprocess.run([sys.executable, "-c", NO_RAY, "ray", "astra-core", "validate", "tool_server", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "astra-core validate is not a stage command" in result.stderr
    result = subprocess.run([sys.executable, "-c", NO_RAY, "ray", "astra-reward", "f1", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        "astra-reward f1: astra-core ray needs ray: pip install 'astra-agent-core[ray]'"]


def test_the_commands_help_imports_no_ray():
    script = ("import sys\nfrom click.testing import CliRunner\nfrom astra_core.cli import main\n"
              "for args in (['--help'], ['ray', '--help'], ['ray', 'astra-toolgraph', 'walk', '--help']):\n"
              "    result = CliRunner().invoke(main, args)\n"
              "    assert result.exit_code == 0, result.output\n"
              "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'pyarrow', 'pandas'))))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_session_ray_leaves_the_test_process_sigterm_handler_as_it_was(local_ray):
    """ray.init() in a driver sets a SIGTERM handler (SystemExit) that ray.shutdown() leaves: in a test session it
    took the SIGTERM that astra-grpo's resume tests send to their own trainer (they failed, and the session
    aborted at exit, when a Ray test ran first)."""
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


_FIXTURE_TESTS = '''
import ray


def test_in_process(local_ray):
    assert len(ray.data.range(8).map_batches(lambda batch: batch).take_all()) == 8


def test_cluster(ray_cluster):
    assert ray_cluster.address.startswith("127.0.0.1:")
'''


@pytest.mark.slow
@pytest.mark.parametrize("selected", ["test_cluster", "test_in_process or test_cluster"])
def test_a_session_with_the_ray_fixtures_ends_cleanly_for_a_user_ray_never_ran_for(tmp_path, selected):
    """A user whose ~/.ray has no token yet gets a cluster (`ray start` with token authentication makes none), and
    a session that ran Ray Data on local_ray before it used ray_cluster ends with its summary (`ray stop` used to
    end the in-process Ray too, and the driver, its Ray Data threads still talking to it, exited with status 1
    before pytest could report)."""
    (tmp_path / "test_fixtures.py").write_text(_FIXTURE_TESTS)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-k", selected,
                           str(tmp_path / "test_fixtures.py")], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=600)
    said = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0 and f"{selected.count('test_')} passed" in done.stdout.splitlines()[-1], said
