"""merge: homogeneous sub-environments merged, every member re-verified in the sandbox (real nsjail)."""

import asyncio
import json

import pytest
from astra_core.llm import LLMClient, LLMConfig
from astra_core.schema import validate
from astra_qaenv.build import BuildConfig, assemble, build_environment, environment_record
from astra_qaenv.kb import load_kb
from astra_qaenv.merge import MergeConfig, merge_environment
from astra_qaenv.programmatic import ProgrammaticConfig, synthesize_from
from astra_qaenv.validate import ValidationConfig, validate_instance
from astra_sandbox import SandboxConfig, open_session
from qaenv_helpers import router, schema_name

pytestmark = pytest.mark.nsjail


def homogeneous_instance():
    """A Parallel Single-Hop instance asking one field of three entities (three copies of one lookup tool)."""
    kb = load_kb()
    config = ProgrammaticConfig(scenarios=("Parallel Single-Hop",), per_entity=1)
    for entity in kb.entities.values():
        for record in synthesize_from(kb, entity, config):
            names = {s["tool_call"]["name"] for s in record["decomposition_trace"]}
            if len(names) == 1 and len(record["decomposition_trace"]) == 3:
                return record
    raise AssertionError("the bundled KB has no homogeneous parallel instance")


def test_homogeneous_lookups_merge_into_one_tool_with_all_rows(verifier):
    async def run():
        instance = await validate_instance(homogeneous_instance(), None, ValidationConfig(judge=False))
        env = await build_environment(instance, None, verifier, BuildConfig())
        return instance, env, await merge_environment(env, None, verifier, MergeConfig(seed=3))

    instance, env, merged = asyncio.run(run())
    assert len(env["tools"]) == 3 and len(validate(merged, "environment")["tools"]) == 1
    (tool,) = merged["tools"]
    assert tool["function"]["name"] == env["subenvs"][0]["base_name"]  # the plain name, not `x_2`
    (subenv,) = merged["subenvs"]
    for env_subenv in env["subenvs"]:
        assert env_subenv["source"]["rows"].items() <= subenv["source"]["rows"].items()
    assert merged["merge"]["tools_before"] == 3 and merged["merge"]["tools_after"] == 1
    assert merged["merge"]["groups"] == [[1, 2, 3]] and len(merged["merge"]["log"]) == 2
    with open_session(merged["code"], config=SandboxConfig()) as session:
        calls = {c["sub_id"]: c for c in merged["verified_calls"]}
        for step in instance["decomposition_trace"]:
            call = calls[step["_uuid"]]
            result = session.call(call["tool"], call["arguments"])
            assert result.ok and result.output == call["observation"] and step["sub_answer"] in result.output


# -- LLM-written tools, merged by the LLM (recorded replies) --------------------------------------------

def code(table):
    return f"def get_weather(city):\n    data = {table!r}\n    return {{'forecast': data.get(city.lower(), 'no data')}}\n"


def llm_env(verifier):
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Forecast for a city.",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                            "required": ["city"]}}}
    subenvs = []
    for sub_id, (city, forecast) in enumerate([("oslo", "rain"), ("rome", "sunny")], start=1):
        subenvs.append({"tool": json.loads(json.dumps(tool)), "impl": "get_weather", "code": code({city: forecast}),
                        "source": {"kind": "llm"},
                        "calls": [{"sub_id": sub_id, "tool": "get_weather", "arguments": {"city": city.title()},
                                   "expected": forecast}]})
    from astra_qaenv.compose import unique_names

    subenvs = unique_names(subenvs)
    instance = {"id": "qa-weather", "domain": "weather", "scenario_type": "Parallel Single-Hop",
                "main_question": "Weather in Oslo and Rome?", "final_answer": "rain, sunny", "meta": {},
                "decomposition_trace": [
                    {"_uuid": 1, "hop_level": 1, "sub_question": "What is the weather in Oslo?", "is_parallel": True,
                     "dependency": None, "sub_answer": "rain", "needs_tool": True},
                    {"_uuid": 2, "hop_level": 1, "sub_question": "What is the weather in Rome?", "is_parallel": True,
                     "dependency": None, "sub_answer": "sunny", "needs_tool": True}]}
    code_text, verified = assemble(subenvs, verifier)
    return environment_record(instance, subenvs, code_text, verified)


def test_llm_merge_reverifies_every_member_and_retries_a_breaking_insertion(recorded_llm, verifier):
    env = llm_env(verifier)
    assert [t["function"]["name"] for t in env["tools"]] == ["get_weather", "get_weather_2"]
    def new_city(body):
        return "Oslo" if "New sub-question: What is the weather in Oslo?" in body["messages"][0]["content"] else "Rome"

    def breaks_base(body):  # a rewrite that has only the new city's data
        city = new_city(body)
        return {"analysis": "", "function": code({city.lower(): "rain" if city == "Oslo" else "sunny"}),
                "call": {"name": "get_weather", "arguments": {"city": city}}}

    def keeps_both(body):
        return {"analysis": "", "function": code({"oslo": "rain", "rome": "sunny"}),
                "call": {"name": "get_weather", "arguments": {"city": new_city(body)}}}

    # Recorded replies: one homogeneous group; the first rewrite loses the base's data, the second keeps it.
    server = recorded_llm(replies=[router(
        homogeneous_groups=[{"clusters": [{"_uuids": [1, 2], "intent_summary": "weather by city"}]}],
        merge_insertion=[breaks_base, keeps_both])])

    async def run():
        async with LLMClient(LLMConfig(base_url=server.base_url, max_retries=0)) as llm:
            return await merge_environment(env, llm, verifier, MergeConfig(seed=0, attempts=2))

    merged = asyncio.run(run())
    assert [schema_name(r) for r in server.chat_requests] == ["homogeneous_groups", "merge_insertion",
                                                              "merge_insertion"]
    assert [t["function"]["name"] for t in merged["tools"]] == ["get_weather"]
    assert sorted(c["expected"] for c in merged["verified_calls"]) == ["rain", "sunny"]
    assert "merged by LLM data expansion" in merged["merge"]["log"][0]
    # the prompt showed the model the base's call that must keep working, and the retry came after a failure
    prompt = server.chat_requests[1]["messages"][0]["content"]
    assert "get_weather(city='Oslo') -> 'rain'" in prompt or "get_weather(city='Rome') -> 'sunny'" in prompt


def test_a_failed_insertion_keeps_the_member_as_its_own_tool(recorded_llm, verifier):
    env = llm_env(verifier)
    never = {"analysis": "", "function": code({}), "call": {"name": "get_weather", "arguments": {"city": "Rome"}}}
    server = recorded_llm(replies=[router(homogeneous_groups=[{"clusters": [{"_uuids": [1, 2]}]}],
                                          merge_insertion=[never])])

    async def run():
        async with LLMClient(LLMConfig(base_url=server.base_url, max_retries=0)) as llm:
            return await merge_environment(env, llm, verifier, MergeConfig(attempts=2))

    merged = asyncio.run(run())
    assert len(merged["tools"]) == 2 and merged["merge"]["tools_after"] == 2
    assert "kept their own tool" in merged["merge"]["log"][0] and "re-verification failed" in merged["merge"]["log"][0]
