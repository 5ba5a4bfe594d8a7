"""The CLI pipeline on the bundled KB: programmatic -> validate -> build-env -> merge -> export (+ gold), real nsjail."""

import hashlib
import json
import re

import pytest
from astra_core.schema import validate
from astra_core.testing import RecordedLLM
from astra_qaenv.trace import by_level
from qaenv_helpers import read, write

pytestmark = pytest.mark.nsjail


def bag_of_words(text):
    """Deterministic embeddings for the recorded endpoint: hashed word counts (similar docs, similar vectors)."""
    vector = [0.0] * 64
    for word in re.findall(r"[a-z]+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
    return vector


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Environments for 3 start entities of every entity type, through the real commands."""
    from astra_qaenv.cli import main
    from click.testing import CliRunner

    tmp = tmp_path_factory.mktemp("pipeline")
    runner = CliRunner()
    entities = runner.invoke(main, ["sample-data", "entities"]).output.splitlines()
    starts, per_type = [], {}
    for line in entities:
        row = json.loads(line)
        if per_type.setdefault(row["type"], 0) < 3:
            per_type[row["type"]] += 1
            starts.append(row)
    starts.append({"id": "city/atlantis", "type": "city", "name": "Atlantis"})
    write(tmp / "starts.jsonl", starts)
    steps = [
        ["programmatic", tmp / "starts.jsonl", "--per-entity", "2", "-o", tmp / "qa.jsonl", "--rejects", tmp / "r0.jsonl"],
        ["validate", "--no-judge", tmp / "qa.jsonl", "-o", tmp / "valid.jsonl", "--rejects", tmp / "r1.jsonl"],
        ["build-env", tmp / "valid.jsonl", "-o", tmp / "env.jsonl", "--rejects", tmp / "r2.jsonl"],
        ["merge", tmp / "env.jsonl", "-o", tmp / "merged.jsonl", "--rejects", tmp / "r3.jsonl"],
    ]
    # validate --no-judge, build-env and merge ask the LLM nothing here, but every LLM stage opens its endpoint
    server = RecordedLLM(replies=[]).start()
    try:
        for args in steps:
            result = runner.invoke(main, [str(a) for a in args], env={"ASTRA_LLM_BASE_URL": server.base_url},
                                   catch_exceptions=False)
            assert result.exit_code == 0, result.output
        assert server.chat_requests == []
    finally:
        server.stop()
    return tmp


def test_every_record_is_accounted_for(built):
    starts, qa = read(built / "starts.jsonl"), read(built / "qa.jsonl")
    (unknown,) = read(built / "r0.jsonl")
    assert unknown["id"] == "city/atlantis" and "not in the knowledge base" in unknown["reason"]
    assert {r["meta"]["parent_id"] for r in qa} == {s["id"] for s in starts} - {"city/atlantis"}
    for before, after, rejects in (("qa", "valid", "r1"), ("valid", "env", "r2"), ("env", "merged", "r3")):
        assert len(read(built / f"{before}.jsonl")) == len(read(built / f"{after}.jsonl")) + len(
            read(built / f"{rejects}.jsonl"))
    merged = read(built / "merged.jsonl")
    assert len(merged) == len(qa) >= 40
    assert sum(m["merge"]["tools_before"] - m["merge"]["tools_after"] for m in merged) > 0
    for env in merged:
        validate(env, "environment")
        expected = {s["_uuid"]: s["sub_answer"] for s in env["instance"]["decomposition_trace"] if s["needs_tool"]}
        assert {c["sub_id"]: c["expected"] for c in env["verified_calls"]} == expected
        assert all(c["expected"] in c["observation"] for c in env["verified_calls"])


def export(cli, built, tmp_path, *args, env=None):
    result = cli("export", built / "merged.jsonl", "-o", tmp_path / "rl.jsonl", "--rejects", tmp_path / "rej.jsonl",
                 *args, env=env)
    assert result.exit_code == 0, result.output
    assert read(tmp_path / "rej.jsonl") == []
    return read(tmp_path / "rl.jsonl")


def test_bands_mixing_with_endpoint_embeddings(cli, built, tmp_path, recorded_llm):
    server = recorded_llm(embeddings=bag_of_words)
    samples = export(cli, built, tmp_path, "--embedder", "endpoint", "--per-band", "2",
                     env={"ASTRA_LLM_BASE_URL": server.base_url})
    embedded = [r for r in server.requests if "input" in r]
    docs = [text for r in embedded for text in r["input"]]
    assert len(docs) == len(set(docs)) and all('"name"' in d and '"parameters"' in d for d in docs)
    envs = {e["id"]: e for e in read(built / "merged.jsonl")}
    pool_domains = {}
    for env in envs.values():
        for subenv in env["subenvs"]:
            pool_domains.setdefault(subenv.get("base_name", subenv["tool"]["function"]["name"]), env["domain"])
    mixed = 0
    for sample in samples:
        validate(sample, "rl_sample")
        env = envs[sample["meta"]["parent_id"]]
        own = [t["function"]["name"] for t in env["tools"]]
        names = [t["function"]["name"] for t in sample["tools"]]
        assert sorted(names) == sorted(own + sample["distractors"])
        assert all(pool_domains[d] != env["domain"] for d in sample["distractors"])  # same domain never mixed in
        assert all(len(sample["mixing"]["bands"][b]) <= 2 for b in ("high", "med", "low"))
        assert sample["environment"]["code"] == env["code"] and sample["reward"] == {"kind": "f1"}
        assert sample["messages"][1] == {"role": "user", "content": env["instance"]["main_question"]}
        assert [j["answer"] for j in sample["job"]] == [s["sub_answer"] for s in env["instance"]["decomposition_trace"]]
        mixed += bool(sample["distractors"])
    assert mixed == len(samples)
    # same seed, same samples; the shuffle puts the environment's tools in varying positions
    again = export(cli, built, tmp_path, "--embedder", "endpoint", "--per-band", "2", env={"ASTRA_LLM_BASE_URL": server.base_url})
    assert [s["tools"] for s in again] == [s["tools"] for s in samples]
    first = {s["tools"][0]["function"]["name"] in s["distractors"] for s in samples}
    assert first == {True, False}


def test_random_and_none_mixing(cli, built, tmp_path):
    random_samples = export(cli, built, tmp_path, "--mixing", "random")
    assert all(5 <= len(s["distractors"]) <= 9 for s in random_samples)
    plain = export(cli, built, tmp_path, "--mixing", "none")
    envs = {e["id"]: e for e in read(built / "merged.jsonl")}
    for sample in plain:
        assert sample["distractors"] == [] and sample["mixing"] == {"mode": "none", "names": []}
        assert sorted(map(str, sample["tools"])) == sorted(map(str, envs[sample["meta"]["parent_id"]]["tools"]))


def test_gold_trajectories_replay_the_verified_calls(cli, built, tmp_path):
    samples = export(cli, built, tmp_path, "--mixing", "random", "--gold-trajectories", tmp_path / "gold.jsonl")
    gold = read(tmp_path / "gold.jsonl")
    envs = {e["id"]: e for e in read(built / "merged.jsonl")}
    assert [g["task_id"] for g in gold] == [s["id"] for s in samples]
    for sample, trajectory in zip(samples, gold, strict=True):
        validate(trajectory, "trajectory")
        assert trajectory["scores"]["f1"] == 1.0  # astra-reward's F1 on the sample's job
        env = envs[sample["meta"]["parent_id"]]
        messages = trajectory["messages"]
        assert messages[:2] == sample["messages"] and trajectory["tools"] == sample["tools"]
        turns = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
        levels = [lvl for lvl in by_level(env["instance"]["decomposition_trace"]) if any(s["needs_tool"] for s in lvl)]
        assert len(turns) == len(levels)  # one turn per hop level, its calls in parallel
        observations = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        verified = {(c["tool"], json.dumps(c["arguments"])): c["observation"] for c in env["verified_calls"]}
        for turn in turns:
            for call in turn["tool_calls"]:
                key = (call["function"]["name"], json.dumps(json.loads(call["function"]["arguments"])))
                assert observations[call["id"]] == verified[key]
        final = messages[-1]
        assert final["role"] == "assistant" and not final.get("tool_calls")
        for job in sample["job"]:
            assert job["answer"] in (final["content"] if not job["needs_tool"] else " ".join(observations.values()))


def test_a_sample_its_verified_calls_cannot_solve_is_rejected(cli, built, tmp_path):
    envs = read(built / "merged.jsonl")
    envs[0]["verified_calls"][0]["observation"] = '{"result": "nothing useful"}'  # tampered
    write(tmp_path / "tampered.jsonl", envs)
    result = cli("export", tmp_path / "tampered.jsonl", "--mixing", "none", "-o", tmp_path / "rl.jsonl",
                 "--rejects", tmp_path / "rej.jsonl")
    assert result.exit_code == 0
    (rejected,) = read(tmp_path / "rej.jsonl")
    assert rejected["id"] == envs[0]["id"] and "gold trajectory earns F1" in rejected["reason"]
    assert len(read(tmp_path / "rl.jsonl")) == len(envs) - 1


def test_export_reads_stdin_as_it_reads_a_file(cli, built, tmp_path):
    from_file = export(cli, built, tmp_path, "--mixing", "random")
    for args in (["-"], []):
        result = cli("export", *args, "--mixing", "random", "--rejects", tmp_path / "rej.jsonl",
                     input=(built / "merged.jsonl").read_bytes())
        assert result.exit_code == 0, result.stderr
        from_stdin = [json.loads(line) for line in result.stdout.splitlines()]
        assert [(s["id"], s["tools"]) for s in from_stdin] == [(s["id"], s["tools"]) for s in from_file]
        assert "<stdin>" not in result.stderr and read(tmp_path / "rej.jsonl") == []


def test_export_of_a_wrong_typed_environment_names_its_line_and_field(cli, built):
    env = read(built / "merged.jsonl")[0]
    for field, wrong in (("tools", "not a list"), ("instance.domain", ["geography"])):  # (a domain list: a TypeError)
        top, _, inner = field.partition(".")
        broken = {**env, top: {**env[top], inner: wrong} if inner else wrong}
        result = cli("export", "-", "--mixing", "none", input=json.dumps(broken) + "\n")
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert "<stdin>:1" in result.stderr and f"field {field}" in result.stderr, result.stderr


@pytest.mark.parametrize(("command", "needs"), [("export", ["instance"]), ("merge", ["instance", "subenvs"])])
def test_an_environment_not_built_by_build_env_is_malformed_naming_what_it_lacks(cli, built, tmp_path, command,
                                                                                   needs):
    """An environment written by hand (astra-sandbox and the engine take those) has no `instance` or `subenvs`:
    export and merge reject it as malformed, saying which, not with a KeyError of the first line that read it."""
    env = read(built / "merged.jsonl")[0]
    no_mixing = ["--mixing", "none"] if command == "export" else []
    for field in needs:
        hand_made = {key: value for key, value in env.items() if key != field}
        result = cli(command, "-", *no_mixing, "--skip-bad", "--rejects", tmp_path / "rej.jsonl",
                     input=json.dumps(hand_made) + "\n")
        assert result.exit_code in (0, 3), result.stderr
        [reject] = read(tmp_path / "rej.jsonl")
        assert reject["reason"].startswith("malformed") and f"'{field}' is a required property" in reject["reason"]


def test_export_from_stdin_rejects_a_broken_line_with_its_source_and_counts_it(cli, built, tmp_path):
    envs = (built / "merged.jsonl").read_bytes().splitlines(keepends=True)
    data = envs[0] + b"{broken\n" + b"".join(envs[1:])
    result = cli("export", "-", "--mixing", "none", input=data)
    assert result.exit_code == 1 and result.stderr.strip().splitlines()[-1].startswith("astra-qaenv export: <stdin>:2")
    result = cli("export", "--mixing", "none", "--skip-bad", "--rejects", tmp_path / "rej.jsonl", input=data)
    assert result.exit_code == 0, result.stderr
    [reject] = read(tmp_path / "rej.jsonl")
    assert reject["source"] == "<stdin>:2" and reject["reason"].startswith("malformed")
    samples = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(samples) == len(envs)
    assert {s["meta"]["provenance"][-1]["command"] for s in samples} == {"astra-qaenv export"}
    assert f"read {len(envs) + 1} · wrote {len(envs)} from {len(envs)} · rejected 1" in result.stderr
