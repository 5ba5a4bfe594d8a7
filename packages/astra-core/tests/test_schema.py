import copy

import orjson
import pytest
from astra_core import KINDS, RecordError, dumps, validate
from astra_core.formats_doc import example as example_of
from astra_core.invariants import unknown_dependencies
from astra_core.jsonl import parse_line
from astra_core.schema import errors, is_valid, schema
from core_strategies import record
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_records_round_trip_through_jsonl(kind, data):
    rec = data.draw(record(kind))
    validate(rec, kind)
    line = dumps(rec)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    parsed = parse_line("x.jsonl", 1, line, kind).record
    assert parsed == orjson.loads(orjson.dumps(rec))


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_requires_id_and_meta(kind):
    required = schema(kind)["required"]
    assert "id" in required and "meta" in required


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_unknown_fields_are_kept(kind, data):
    rec = data.draw(record(kind))
    rec["x_custom"] = {"anything": [1, 2]}
    assert validate(rec, kind)["x_custom"] == {"anything": [1, 2]}


def test_error_names_record_and_field():
    rec = {"id": "t1", "meta": {}, "messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}],
           "tools": []}
    with pytest.raises(RecordError) as info:
        validate(rec, "trajectory")
    assert info.value.record_id == "t1"
    assert info.value.field == "messages[1].role"
    assert "record 't1'" in str(info.value) and "messages[1].role" in str(info.value)


@pytest.mark.parametrize(("parameters", "field"), [
    ({"type": "object", "properties": "x"}, "tools[0].function.parameters.properties"),
    ({"type": "object", "properties": {"q": "str"}}, "tools[0].function.parameters.properties.q"),
    ({"type": "object", "properties": {"q": {"type": "string"}}, "required": "q"}, "tools[0].function.parameters.required"),
])
def test_a_tools_parameter_schema_is_typed_where_stages_read_it(parameters, field):
    """Every stage reading tools walks `properties` and `required`: a string there was an AttributeError (exit 3)
    in verify-chains, synthesize-chains, judge-task and evolve plans, not a field named."""
    server = copy.deepcopy(example_of("tool_server"))
    server["tools"][0]["function"]["parameters"] = parameters
    with pytest.raises(RecordError) as info:
        validate(server, "tool_server")
    assert info.value.field == field


@pytest.mark.parametrize("kind", ["rl_sample", "trajectory"])
@pytest.mark.parametrize(("user", "field"), [
    ({"instruction": "Get online.", "tools": "phone"}, "user.tools"),
    ({"instruction": "Get online.", "tools": [{"type": "function"}]}, "user.tools[0]"),
    ({"instruction": 5}, "user.instruction"),
    ({"private_info": "ada@example.com"}, "user"),
    ("Get online.", "user"),
])
def test_a_user_simulator_profile_is_typed(kind, user, field):
    """A user's tools reach the user model's endpoint and a tau2 environment: a wrong shape is a field named,
    never sent (a string of tools became a list of letters)."""
    record = {**copy.deepcopy(example_of(kind)), "user": user}
    with pytest.raises(RecordError) as info:
        validate(record, kind)
    assert info.value.field == field
    validate({**record, "user": {"instruction": "Get online.", "private_info": {"sim": "esim"},
                                 "tools": example_of("tool_server")["tools"]}}, kind)
    validate({**record, "user": None}, kind)


def test_tool_message_needs_its_call_id():
    rec = {"id": "t2", "meta": {}, "tools": [], "messages": [{"role": "tool", "content": "42"}]}
    problems = errors(rec, "trajectory")
    assert any(p.field == "messages[0]" and "tool_call_id" in p.message for p in problems)


def test_qa_instance_uses_astra_field_names():
    rec = {"id": "q1", "meta": {}, "main_question": "?", "final_answer": "!", "decomposition_trace": [
        {"_uuid": 1, "hop_level": 1, "sub_question": "a?", "is_parallel": True, "dependency": None, "sub_answer": "a"}]}
    validate(rec, "qa_instance")
    broken = copy.deepcopy(rec)
    del broken["decomposition_trace"][0]["sub_answer"]
    with pytest.raises(RecordError, match="sub_answer"):
        validate(broken, "qa_instance")


def two_hops(first_dependency, second_dependency, *, second_uuid=2) -> dict:
    step = {"hop_level": 1, "sub_question": "a?", "is_parallel": False, "sub_answer": "a"}
    return {"id": "q2", "meta": {}, "main_question": "?", "final_answer": "!", "decomposition_trace": [
        {**step, "_uuid": 1, **first_dependency}, {**step, "_uuid": second_uuid, **second_dependency}]}


@pytest.mark.parametrize("dependencies", [
    ({"dependency": None}, {"dependency": [1]}),
    ({"dependency": None}, {"dependency": ["1"]}),  # LLMs write ids as 1 or "1": the same id
    ({"dependency": None}, {"dependency": []}),  # null and empty depend on nothing
])
def test_a_trace_whose_dependencies_resolve_is_a_valid_qa_instance(dependencies):
    record = two_hops(*dependencies)
    assert validate(record, "qa_instance") is record
    assert is_valid(record, "qa_instance") and errors(record, "qa_instance") == []


def test_a_missing_dependency_depends_on_nothing():
    """The schema requires the field; the check itself reads a missing one as none (astra-qaenv synthesize runs
    it on what an LLM wrote, before any schema)."""
    assert list(unknown_dependencies(two_hops({}, {}))) == []


def test_a_dependency_on_a_sub_question_the_trace_does_not_have_breaks_the_qa_instance_kind():
    """No schema can say it (a reference across fields): an invariant of the kind, checked by validate,
    errors and is_valid, naming the field, the missing id and the ids the trace has."""
    record = two_hops({"dependency": None}, {"dependency": [1, 7]}, second_uuid="b")
    with pytest.raises(RecordError) as info:
        validate(record, "qa_instance")
    assert info.value.record_id == "q2" and info.value.field == "decomposition_trace[1].dependency"
    assert info.value.message == ("sub-question 'b' depends on 7, which no sub-question of the decomposition has "
                                  "(its _uuid values: 1, 'b')")
    assert not is_valid(record, "qa_instance")
    assert [(e.field, e.message) for e in errors(record, "qa_instance")] == [(info.value.field, info.value.message)]
    assert is_valid(record, {"type": "object"})  # a schema that is not the kind's has no invariant


def test_an_input_schema_extending_qa_instance_keeps_its_invariant():
    """A stage reading a qa_instance with typed extra fields (astra-qaenv build-env) reads it as the kind."""
    extended = {"title": "qa_instance", "allOf": [{"$ref": "https://astra-toolkit.dev/schemas/qa_instance.json"}],
                "properties": {"note": {"type": "string"}}}
    with pytest.raises(RecordError, match="depends on 7") as info:
        validate(two_hops({"dependency": None}, {"dependency": [7]}), extended)
    assert info.value.field == "decomposition_trace[1].dependency"


def test_the_qa_instance_invariant_is_checked_only_on_a_record_the_schema_accepts():
    """The schema's error is the one reported; the invariant never reads a malformed trace (no KeyError)."""
    record = two_hops({"dependency": None}, {"dependency": [7]})
    del record["decomposition_trace"][0]["_uuid"]
    with pytest.raises(RecordError, match="'_uuid' is a required property"):
        validate(record, "qa_instance")
    assert [e.field for e in errors(record, "qa_instance")] == ["decomposition_trace[0]"]


def test_a_line_breaking_the_invariant_is_malformed_naming_file_line_and_field():
    raw = dumps(two_hops({"dependency": None}, {"dependency": [7]}))
    with pytest.raises(RecordError) as info:
        parse_line("qa.jsonl", 3, raw, "qa_instance")
    assert str(info.value).startswith("qa.jsonl:3: record 'q2': field decomposition_trace[1].dependency: not a valid "
                                      "qa_instance: sub-question 2 depends on 7")


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown record kind 'chain'"):
        validate({}, "chain")


@pytest.mark.parametrize("kind", KINDS)
def test_documented_example_is_valid(kind):
    from astra_core.formats_doc import example

    validate(example(kind), kind)


def test_formats_doc_is_up_to_date():
    from pathlib import Path

    from astra_core.formats_doc import render

    doc = Path(__file__).resolve().parents[3] / "docs" / "formats.md"
    assert doc.read_text() == render(), "docs/formats.md is stale: run `astra-core formats-doc > docs/formats.md`"
