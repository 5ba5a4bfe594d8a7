"""`astra-reward f1` and `astra-reward state` over the bundled sample records."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from astra_core.schema import validate
from astra_reward.bundled import data_path
from astra_reward.cli import main
from click.testing import CliRunner

DATA = data_path()


def run(*args, input=None):
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    records = [json.loads(line) for line in result.stdout.splitlines()]
    return result, records


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_f1_joins_rollouts_with_their_samples_and_adds_the_reward():
    result, records = run("f1", DATA / "rollouts.jsonl", "--samples", DATA / "samples.jsonl")
    assert result.exit_code == 0, result.output
    rewards = {r["id"]: round(r["reward"], 3) for r in records}
    assert rewards == {"rl-qa-geo-7/step0/g0": 1.0, "rl-qa-geo-7/step0/g1": 0.8, "rl-qa-geo-7/step0/g2": 0.667,
                       "rl-qa-geo-7/step0/g3": 0.667, "rl-qa-geo-7/step0/g4": 0.0, "rl-weather-2/step0/g0": 1.0,
                       "rl-weather-2/step0/g1": 0.5}
    g3 = next(r for r in records if r["id"].endswith("g3"))
    assert g3["reward_components"]["calls"] == 4 and g3["reward_components"]["malformed_calls"] == 1
    for record in records:
        validate(record, "rollout")  # a scored rollout is a valid rollout record
        assert record["meta"]["provenance"][-1]["command"] == "astra-reward f1"
    assert "read 7" in result.stderr and "wrote 7" in result.stderr


@pytest.mark.parametrize("variant, expected", [("recall", 0.5), ("precision", 1.0)])
def test_f1_variants(variant, expected):
    _, records = run("f1", DATA / "rollouts.jsonl", "--samples", DATA / "samples.jsonl", "--variant", variant)
    g2 = next(r for r in records if r["id"].endswith("geo-7/step0/g2"))
    assert g2["reward"] == expected and g2["reward_components"]["variant"] == variant


def test_f1_min_score_rejects_with_reason_and_missing_jobs_are_rejected(tmp_path):
    rejects = tmp_path / "rejects.jsonl"
    result, records = run("f1", DATA / "rollouts.jsonl", "--samples", DATA / "samples.jsonl",
                          "--min-score", "0.7", "--rejects", rejects)
    assert result.exit_code == 0
    assert len(records) == 3 and all(r["reward"] >= 0.7 for r in records)
    rejected = read(rejects)
    assert len(rejected) == 4
    assert all(r["reason"].startswith("below min score: reward") for r in rejected)
    assert all("reward_components" in r["record"] for r in rejected)  # the reject shows what it scored

    no_job = json.dumps({"id": "x", "messages": []}) + "\n"
    result, records = run("f1", "--rejects", rejects, input=no_job)
    assert records == [] and "no job" in read(rejects)[0]["reason"]
    unknown = json.dumps({"id": "y", "sample_id": "nope", "messages": []}) + "\n"
    run("f1", "--samples", DATA / "samples.jsonl", "--rejects", rejects, input=unknown)
    assert "no sample" in read(rejects)[0]["reason"]


def test_state_reward_diff_and_ignore_fields(tmp_path):
    result, records = run("state", DATA / "states.jsonl")
    assert result.exit_code == 0, result.output
    by_id = {r["id"]: r for r in records}
    assert by_id["state-cancel-ok"]["reward"] == 1.0          # created_at differs but is ignored
    assert by_id["state-profile-exact"]["reward"] == 1.0
    wrong = by_id["state-cancel-wrong-order"]["reward_components"]
    assert by_id["state-cancel-wrong-order"]["reward"] == 0.0
    assert wrong["differences"] == 3
    assert [d["path"] for d in wrong["diff"]] == ["orders.0.status", "orders.1.status", "user.balance"]

    # --ignore adds to the record's own ignore_fields; --max-diff trims the kept diff, not the count.
    _, records = run("state", DATA / "states.jsonl", "--ignore", "orders.*.status", "--ignore", "user.balance",
                     "--max-diff", "1")
    assert all(r["reward"] == 1.0 for r in records)
    _, records = run("state", DATA / "states.jsonl", "--max-diff", "1")
    wrong = next(r for r in records if r["id"] == "state-cancel-wrong-order")["reward_components"]
    assert wrong["differences"] == 3 and len(wrong["diff"]) == 1


def test_a_pattern_given_by_ignore_and_by_the_record_is_listed_once():
    """states.jsonl's records carry ignore_fields ["orders.*.created_at"]; the README's example passes the same
    pattern with --ignore: reward_components.ignore_fields listed it twice."""
    _, records = run("state", DATA / "states.jsonl", "--ignore", "orders.*.created_at", "--ignore", "user.balance",
                     "--ignore", "user.balance")
    by_id = {r["id"]: r["reward_components"]["ignore_fields"] for r in records}
    assert by_id["state-cancel-ok"] == ["orders.*.created_at", "user.balance"]
    assert by_id["state-profile-exact"] == ["orders.*.created_at", "user.balance"]  # no ignore_fields of its own


def test_state_takes_the_expected_state_from_the_sample(tmp_path):
    sample = json.loads((DATA / "samples.jsonl").read_text().splitlines()[0])
    sample["reward"] = {"kind": "state", "expected_state": {"done": True, "at": 1}, "ignore_fields": ["at"]}
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps(sample) + "\n")
    rollouts = "".join(json.dumps({"id": f"r{i}", "sample_id": sample["id"], "final_state": state}) + "\n"
                       for i, state in enumerate([{"done": True, "at": 2}, {"done": False, "at": 1}]))
    rejects = tmp_path / "rejects.jsonl"
    result, records = run("state", "--samples", samples, "--min-score", "1", "--rejects", rejects, input=rollouts)
    assert [r["id"] for r in records] == ["r0"]
    (rejected,) = read(rejects)
    assert rejected["id"] == "r1" and rejected["record"]["reward_components"]["diff"][0]["path"] == "done"

    no_state = json.dumps({"id": "z", "expected_state": {}}) + "\n"
    result, records = run("state", "--rejects", rejects, input=no_state)
    assert result.exit_code == 1 and records == [] and "<stdin>:1" in result.output and "final_state" in result.output
    result, records = run("state", "--skip-bad", "--rejects", rejects, input=no_state)
    assert result.exit_code == 0 and records == []
    assert "final_state" in read(rejects)[0]["reason"] and read(rejects)[0]["source"] == "<stdin>:1"


@pytest.mark.parametrize(("command", "record", "field"), [
    ("state", {"id": "s", "final_state": {"a": 1}, "expected_state": {"a": 2}, "ignore_fields": "a"}, "ignore_fields"),
    ("f1", {"id": "f", "messages": [], "job": "oops"}, "job"),
    ("f1", {"id": "f", "messages": [], "job": [{"question": "q", "answer": "a", "needs_tool": "false"}]},
     "needs_tool"),
    ("f1", {"id": "f", "messages": "hello", "job": []}, "messages"),
    ("f1", {"id": "f", "messages": [], "job": [{"question": "q", "answer": "a"}], "malformed_calls": "2"},
     "malformed_calls"),
    # inside the messages: each of these once scored (a name 5 or arguments [1] matched; a number answered)
    ("f1", {"id": "f", "job": [], "messages": [
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": 5, "arguments": "{}"}}]}]},
     "messages[0].tool_calls[0].function.name"),
    ("f1", {"id": "f", "job": [], "messages": [
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": [1]}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ("f1", {"id": "f", "job": [], "messages": [{"role": "assistant", "tool_calls": "get_capital"}]},
     "messages[0].tool_calls"),
    ("f1", {"id": "f", "job": [], "messages": [{"role": "tool", "tool_call_id": "c", "content": [1, 2]}]},
     "messages[0].content["),
    ("f1", {"id": "f", "job": [{"question": "q", "answer": 709000}], "messages": [
        {"role": "assistant", "content": 709000}]}, "messages[0].content"),
    ("state", {"id": "s", "final_state": "done", "expected_state": {"a": 2}}, "final_state"),
    ("state", {"id": "s", "final_state": {"a": 1}, "expected_state": None}, "expected_state"),
    # the fields every record shares, whatever the stage
    ("state", {"id": ["s"], "final_state": {}, "expected_state": {}}, "field id"),
    ("state", {"id": 7, "final_state": {}, "expected_state": {}}, "field id"),
    ("f1", {"id": "f", "messages": [], "job": [], "meta": "x"}, "field meta"),
    # checked by the stage function (the field sits in an untyped object): malformed all the same
    ("f1", {"id": "f", "messages": [], "job": [{"question": "q", "answer": "a"}],
            "reward_components": {"malformed_calls": "x"}}, "field reward_components.malformed_calls"),
])
def test_a_wrong_typed_field_is_rejected_naming_line_and_field_never_scored(command, record, field, tmp_path):
    """A string where a list or a boolean belongs once scored 1.0 or 0 without a word (or a traceback)."""
    rejects = tmp_path / "rejects.jsonl"
    result, records = run(command, "--skip-bad", "--rejects", rejects, input=json.dumps(record) + "\n")
    assert result.exit_code == 0 and records == []
    [reject] = read(rejects)
    assert field in reject["reason"] and reject["source"] == "<stdin>:1"
    result, _ = run(command, input=json.dumps(record) + "\n")
    assert result.exit_code == 1 and field in result.output and "Traceback" not in result.output


def test_f1_scores_a_job_whose_ids_are_integers_as_the_common_schema_allows():
    """A job carried on the record is typed as sub_qa is everywhere else (ids: string or integer); the bundled
    samples' integer ids were once a reject when the job came on the record instead of from --samples."""
    [trajectory] = [r for r in read(DATA / "trajectories.jsonl") if r["id"] == "traj-geo-good"]
    [sample] = [s for s in read(DATA / "samples.jsonl") if s["id"] == "rl-qa-geo-7"]
    assert all(isinstance(j["id"], int) for j in sample["job"])
    result, [scored] = run("f1", input=json.dumps({**trajectory, "job": sample["job"]}) + "\n")
    assert result.exit_code == 0 and scored["reward"] == 1.0 and scored["reward_components"]["solved_ids"] == [1, 2]


def test_the_components_of_both_rewards_are_the_schemas_one_shape():
    """`reward_components` is typed in common.json by kind: what f1 and state write validates as a rollout's,
    and a wrong-typed or missing part does not."""
    from astra_core.formats_doc import example
    from astra_core.schema import RecordError

    _, f1 = run("f1", DATA / "rollouts.jsonl", "--samples", DATA / "samples.jsonl")
    _, state = run("state", DATA / "states.jsonl")
    for scored in (*f1, *state):
        validate({**example("rollout"), "reward_components": scored["reward_components"]}, "rollout")
    assert state[0]["reward_components"]["ignore_fields"] == ["orders.*.created_at"]
    f1_parts = f1[0]["reward_components"]
    for broken, field in (({**f1_parts, "recall": "1.0"}, "recall"), ({"kind": "state", "match": True}, "(record)")):
        with pytest.raises(RecordError, match=field):
            validate({**example("rollout"), "reward_components": broken}, "rollout")
    validate({**example("rollout"), "reward_components": {}}, "rollout")  # an episode that failed before scoring


def test_console_script_runs_a_pipeline():
    script = Path(sys.executable).parent / "astra-reward"
    data = subprocess.run([script, "sample-data", "rollouts.jsonl"], capture_output=True, text=True, check=True)
    assert Path(data.stdout.strip()) == DATA / "rollouts.jsonl"
    out = subprocess.run([script, "f1", "--samples", DATA / "samples.jsonl", "--variant", "recall"],
                         input=(DATA / "rollouts.jsonl").read_text(), capture_output=True, text=True, check=True)
    assert len(out.stdout.splitlines()) == 7 and "astra-reward f1: read 7" in out.stderr
