"""build-env: sandbox-verified environments (real nsjail), programmatic and LLM (recorded replies)."""

import asyncio
import json
import re

import pytest
from astra_core.llm import LLMClient, LLMConfig
from astra_core.schema import validate
from astra_core.stage import Rejected
from astra_qaenv.build import BuildConfig, build_environment
from astra_qaenv.kb import load_kb
from astra_qaenv.programmatic import ProgrammaticConfig, synthesize_from
from astra_qaenv.trace import SCENARIOS
from astra_qaenv.validate import ValidationConfig, validate_instance
from astra_sandbox import SandboxConfig, open_session
from qaenv_helpers import router, schema_name

pytestmark = pytest.mark.nsjail


def programmatic_instances(per_type=3):
    kb = load_kb()
    out = {s: [] for s in SCENARIOS}
    for entity in kb.entities.values():
        for record in synthesize_from(kb, entity, ProgrammaticConfig(per_entity=2)):
            if len(out[record["scenario_type"]]) < per_type:
                out[record["scenario_type"]].append(record)
    return [r for rs in out.values() for r in rs]


async def validated(instance):
    return await validate_instance(instance, None, ValidationConfig(judge=False))


def build(instance, verifier, llm=None, config=None):
    async def run():
        return await build_environment(await validated(instance), llm, verifier, config or BuildConfig())

    return asyncio.run(run())


def test_every_programmatic_sub_answer_is_reproduced_in_the_sandbox(verifier):
    instances = programmatic_instances()
    assert {r["scenario_type"] for r in instances} == set(SCENARIOS)
    for instance in instances:
        env = validate(build(instance, verifier), "environment")
        tool_steps = [s for s in instance["decomposition_trace"] if s["needs_tool"]]
        assert sorted(c["sub_id"] for c in env["verified_calls"]) == sorted(s["_uuid"] for s in tool_steps)
        # Independently: a fresh jailed session of the environment code reproduces every observation.
        with open_session(env["code"], config=SandboxConfig(call_timeout_s=3.0)) as session:
            for call, step in zip(sorted(env["verified_calls"], key=lambda c: c["sub_id"]), tool_steps, strict=True):
                result = session.call(call["tool"], call["arguments"])
                assert result.ok and result.output == call["observation"]
                assert step["sub_answer"] in result.output
            assert session.call(env["tools"][0]["function"]["name"], {"nope": 1}).ok is False


def test_unvalidated_instances_are_rejected_with_the_reason(verifier):
    instance = programmatic_instances(1)[0]
    for step in instance["decomposition_trace"]:
        step.pop("needs_tool")
    with pytest.raises(Rejected, match="run astra-qaenv validate first"):
        asyncio.run(build_environment(instance, None, verifier, BuildConfig()))


# -- the LLM path, with recorded replies ----------------------------------------------------------------

QUESTION = {"id": "qa-llm-1", "domain": "geography", "scenario_type": "Single-Hop",
            "main_question": "What is the capital of Valdoria?", "final_answer": "Ravpelmar",
            "decomposition_trace": [{"_uuid": 1, "hop_level": 1, "sub_question": "What is the capital of Valdoria?",
                                     "is_parallel": False, "dependency": None, "sub_answer": "Ravpelmar",
                                     "needs_tool": True}], "meta": {}}
SPEC = {"analysis": "a lookup", "tool": {"name": "get_capital", "description": "Capital city of a country.",
                                         "parameters": {"type": "object",
                                                        "properties": {"country": {"type": "string"}},
                                                        "required": ["country"]}}}
SCALED = {"analysis": "wider", "tool": {**SPEC["tool"], "parameters": {
    "type": "object", "properties": {"country": {"type": "string"},
                                     "language": {"type": "string", "enum": ["en", "de", "fr"]}},
    "required": ["country"]}}}
CALL = {"analysis": "", "call": {"name": "get_capital", "arguments": {"country": "Valdoria"}}}
RIGHT = {"analysis": "", "function": "def get_capital(country, language='en'):\n"
                                     "    capitals = {'valdoria': 'Ravpelmar', 'ostmark': 'Garcorlen'}\n"
                                     "    return {'capital': capitals.get(country.lower(), 'unknown')}\n"}
WRONG = {"analysis": "", "function": "def get_capital(country, language='en'):\n    return {'capital': 'Oslo'}\n"}


def llm_build(server, verifier, attempts=3, **config):
    async def run():
        async with LLMClient(LLMConfig(base_url=server.base_url, max_retries=0)) as llm:
            return await build_environment(json.loads(json.dumps(QUESTION)), llm, verifier,
                                           BuildConfig(attempts=attempts, **config))

    return asyncio.run(run())


def test_a_wrong_implementation_is_caught_and_retried_from_the_call(recorded_llm, verifier):
    # Recorded replies: the first implementation returns a wrong capital, the second is right.
    server = recorded_llm(replies=[router(tool_spec=[SPEC], complexity_scaling=[SCALED], call_statement=[CALL],
                                          implementation=[WRONG, RIGHT])])
    env = llm_build(server, verifier)
    steps = [schema_name(r) for r in server.chat_requests]
    assert steps == ["tool_spec", "complexity_scaling", "call_statement", "implementation", "call_statement",
                     "implementation"]
    (subenv,) = env["subenvs"]
    log = subenv["source"]["log"]
    assert log[0] == {"step": "complexity_scaling", "outcome": "accepted"}
    assert "lacks the answer 'Ravpelmar'" in log[1]["outcome"] and "Oslo" in log[1]["outcome"]
    assert log[2]["outcome"] == "verified"
    assert "language" in env["tools"][0]["function"]["parameters"]["properties"]  # the scaled spec
    assert env["verified_calls"][0]["observation"] == '{"capital": "Ravpelmar"}'


HANG = {"analysis": "", "function": "def get_capital(country, language='en'):\n    while True:\n        pass\n"}
NETWORK = {"analysis": "", "function": (
    "import socket\n"
    "def get_capital(country, language='en'):\n"
    "    with socket.create_connection(('127.0.0.1', PORT), timeout=2) as conn:\n"
    "        conn.sendall(b'GET /v1/models HTTP/1.0\\r\\n\\r\\n')\n"
    "        conn.recv(100)\n"
    "    return 'Ravpelmar'\n")}
THIRD_PARTY = {"analysis": "", "function": "import requests\ndef get_capital(country, language='en'):\n"
                                           "    return requests.get('http://capitals.example').text\n"}


def test_hanging_network_and_third_party_code_is_contained_and_rejected_with_reasons(recorded_llm, verifier):
    server = recorded_llm(replies=[])
    port = server.base_url.split(":")[-1].split("/")[0]
    network = {**NETWORK, "function": NETWORK["function"].replace("PORT", port)}
    server.replies.append(router(tool_spec=[SPEC], complexity_scaling=[SPEC], call_statement=[CALL],
                                 implementation=[HANG, network, THIRD_PARTY]))
    with pytest.raises(Rejected) as rejected:
        llm_build(server, verifier, attempts=3)
    reason = str(rejected.value)
    assert "no implementation reproduced the answer in 3 attempt(s)" in reason
    attempt1, attempt2, attempt3 = re.split(r"attempt \d: ", reason)[1:]
    assert "timeout" in attempt1
    # The sandbox has no route to the host's loopback: the server that is reachable from here is not from there.
    assert "exception" in attempt2 and ("Connection refused" in attempt2 or "unreachable" in attempt2)
    assert not [r for r in server.requests if "messages" not in r and "input" not in r]
    assert "'requests', which is not in the Python standard library" in attempt3


def test_an_error_observation_that_mentions_the_answer_verifies_nothing(verifier):
    from astra_qaenv.verify import Call

    code = "def get_capital(country):\n    return {'error': 'Ravpelmar is not reachable'}\n"
    (check,) = verifier.check(code, [Call(1, "get_capital", {"country": "Valdoria"}, "Ravpelmar")])
    assert not check.ok and check.kind == "error_observation" and "error_observation" in check.reason()
    (check,) = verifier.check(code.replace("'error'", "'note'"), [Call(1, "get_capital", {"country": "V"}, "Ravpelmar")])
    assert check.ok


def test_sandbox_flags_are_the_sandbox_configs_fields(cli):
    result = cli("build-env", "--sandbox-memory-mb", "32", "--sandbox-pool-size", "1", input="")
    assert result.exit_code == 2 and "'--sandbox-memory-mb': must be >= 64, got 32" in result.stderr, result.output
    zero = cli("merge", "--sandbox-call-timeout-s", "0", input="")  # in the flag's range, but a timeout must be > 0
    assert zero.exit_code == 1 and "call_timeout_s must be > 0" in zero.stderr, zero.output


@pytest.mark.parametrize(("path", "value", "field"), [
    (("tool_source",), 5, "decomposition_trace[0].tool_source"),
    (("tool_source",), {"code": 5}, "decomposition_trace[0].tool_source"),
    (("tool_source", "param"), "x): pass\nimport os\ndef y(", "decomposition_trace[0].tool_source.param"),
    (("tool_call", "arguments"), "a", "decomposition_trace[0].tool_call.arguments"),
])
def test_build_env_reads_a_programmatic_tool_source_typed(cli, tmp_path, path, value, field):
    """A wrong-typed tool_source was a TypeError or KeyError (exit 3); its names become Python names in the
    tool's code, so they must be identifiers."""
    instance = asyncio.run(validated(programmatic_instances(1)[0]))
    target = instance["decomposition_trace"][0]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    inputs = tmp_path / "instances.jsonl"
    inputs.write_text(json.dumps(instance) + "\n")
    result = cli("build-env", inputs, "--no-sandbox-jail", "--base-url", "http://127.0.0.1:9/v1", "--model", "x")
    assert result.exit_code == 1, result.stderr
    assert f"{inputs}:1: record '{instance['id']}': field {field}: " in result.stderr


def test_a_dependency_on_a_missing_sub_question_is_malformed_input_to_build_env(cli, tmp_path):
    """It was built into an environment as if the reference resolved; now the run stops naming file, line,
    record, field and the missing id (or --skip-bad sends it to --rejects), and a valid instance still builds."""
    good, other = (asyncio.run(validated(i)) for i in programmatic_instances(1)[:2])
    bad = json.loads(json.dumps(other))
    last = len(bad["decomposition_trace"]) - 1
    bad["decomposition_trace"][last]["dependency"] = ["no-such-step"]
    inputs = tmp_path / "instances.jsonl"
    inputs.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    no_llm = ("--base-url", "http://127.0.0.1:9/v1", "--model", "x")  # lookups only: no LLM is asked
    stopped = cli("build-env", inputs, *no_llm, "--sandbox-pool-size", "1", "-o", tmp_path / "envs.jsonl")
    assert stopped.exit_code == 1, stopped.stderr
    assert (f"{inputs}:2: record '{bad['id']}': field decomposition_trace[{last}].dependency: not a valid "
            f"qa_instance: sub-question {bad['decomposition_trace'][last]['_uuid']!r} depends on 'no-such-step'"
            ) in stopped.stderr
    skipped = cli("build-env", inputs, *no_llm, "--sandbox-pool-size", "1", "--skip-bad", "-o", tmp_path / "envs.jsonl",
                  "--rejects", tmp_path / "rejects.jsonl")
    assert skipped.exit_code == 0, skipped.stderr
    (env,) = [json.loads(line) for line in (tmp_path / "envs.jsonl").read_text().splitlines()]
    assert env["instance_id"] == good["id"] and validate(env, "environment")
    (rejected,) = [json.loads(line) for line in (tmp_path / "rejects.jsonl").read_text().splitlines()]
    assert rejected["id"] == bad["id"] and f"field decomposition_trace[{last}].dependency" in rejected["reason"]
