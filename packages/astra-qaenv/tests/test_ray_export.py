"""`astra-qaenv export` (a pure stage whose resource reads every input, with a side output) on Ray Data
(`astra-core ray`) writes the samples, gold trajectories, rejects and counts of one process.

The environments come from the real commands on the bundled KB (programmatic -> validate -> build-env, real nsjail).
Runs in-process on the session's local Ray (`local_ray`, astra_core.testing).
"""

import json

import pytest
from astra_core.cli import main as core
from astra_core.testing import RecordedLLM, records_as_run, summary_of
from click.testing import CliRunner
from qaenv_helpers import read

pytestmark = pytest.mark.nsjail


@pytest.fixture(scope="module")
def environments(tmp_path_factory):
    """Environments of 1 start entity of each entity type, built by the commands in one process."""
    from astra_qaenv.cli import main

    tmp = tmp_path_factory.mktemp("ray-export")
    runner = CliRunner()
    starts, types = [], set()
    for line in runner.invoke(main, ["sample-data", "entities"]).output.splitlines():
        row = json.loads(line)
        if row["type"] not in types:
            types.add(row["type"])
            starts.append(line + "\n")
    (tmp / "starts.jsonl").write_text("".join(starts))
    server = RecordedLLM(replies=[]).start()  # (every LLM stage opens its endpoint; none asks it here)
    try:
        for args in (["programmatic", tmp / "starts.jsonl", "--per-entity", "2", "-o", tmp / "qa.jsonl"],
                     ["validate", "--no-judge", tmp / "qa.jsonl", "-o", tmp / "valid.jsonl"],
                     ["build-env", tmp / "valid.jsonl", "-o", tmp / "env.jsonl", "--sandbox-pool-size", "1"]):
            result = runner.invoke(main, [str(a) for a in args], env={"ASTRA_LLM_BASE_URL": server.base_url})
            assert result.exit_code == 0, result.output
    finally:
        server.stop()
    return tmp / "env.jsonl"


def with_bad_lines(environments, tmp_path):
    """The environments, and bad input: no JSON, a wrong-typed field, an environment without its instance, and one
    whose verified calls cannot solve it (the stage's own Rejected)."""
    envs = read(environments)
    assert len(envs) >= 8
    lines = [json.dumps(env) for env in envs]
    lines[1] = "{broken"
    lines[3] = json.dumps({**envs[3], "tools": "not a list"})
    lines[5] = json.dumps({key: value for key, value in envs[5].items() if key != "instance"})
    tampered = json.loads(json.dumps(envs[6]))
    tampered["verified_calls"][0]["observation"] = '{"result": "nothing useful"}'
    lines[6] = json.dumps(tampered)
    path = tmp_path / "envs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_export_on_ray_writes_the_samples_gold_rejects_and_counts_of_one_process(environments, tmp_path, local_ray):
    from astra_qaenv.cli import main as qaenv

    path = with_bad_lines(environments, tmp_path)
    flags = ["--mixing", "random", "--skip-bad"]
    here = CliRunner().invoke(qaenv, ["export", str(path), *flags, "-o", str(tmp_path / "here.jsonl"),
                                      "--rejects", str(tmp_path / "here.rej.jsonl"),
                                      "--gold-trajectories", str(tmp_path / "here.gold.jsonl")])
    assert here.exit_code == 0, here.output
    there = CliRunner().invoke(core, ["ray", "--actors", "2", "--batch-size", "3", "astra-qaenv", "export", str(path),
                                      *flags, "-o", str(tmp_path / "ray.jsonl"),
                                      "--rejects", str(tmp_path / "ray.rej.jsonl"),
                                      "--gold-trajectories", str(tmp_path / "ray.gold.jsonl")])
    assert there.exit_code == 0, there.output
    for kind in ("jsonl", "rej.jsonl", "gold.jsonl"):
        assert records_as_run(tmp_path / f"ray.{kind}") == records_as_run(tmp_path / f"here.{kind}"), kind
    assert summary_of(there.stderr, "astra-qaenv export") == summary_of(here.stderr, "astra-qaenv export")
    samples = read(tmp_path / "ray.jsonl")
    assert samples and any(sample["distractors"] for sample in samples)  # the pool of every input's tools, per actor
    assert len(read(tmp_path / "ray.gold.jsonl")) == len(samples)
    assert "rejected 4" in there.stderr and "gold trajectory earns F1" in (tmp_path / "ray.rej.jsonl").read_text()
