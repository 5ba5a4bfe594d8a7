import copy

import orjson
import pytest
from astra_core import KINDS, RecordError, dumps, validate
from astra_core.formats_doc import example as example_of
from astra_core.jsonl import parse_line
from astra_core.schema import errors, schema
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
