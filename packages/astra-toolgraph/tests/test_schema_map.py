import pytest
from astra_toolgraph.schema_map import Unmappable, openai_tool, output_schema, to_parameters, tool_name


def test_bfcl_type_names_become_json_schema_types():
    schema = {"type": "dict", "properties": {"speed": {"type": "float"}, "tags": {"type": "tuple", "items": {"type": "str"}},
                                             "anything": {"type": "any", "description": "free"}},
              "required": ["speed"]}
    mapped = to_parameters(schema)
    assert mapped["type"] == "object"
    assert mapped["properties"]["speed"]["type"] == "number"
    assert mapped["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert mapped["properties"]["anything"] == {"description": "free"}


def test_local_refs_are_inlined_against_the_root():
    root = {"components": {"schemas": {"Item": {"type": "object", "properties": {"isbn": {"type": "string"}}}}}}
    schema = {"type": "object", "properties": {"item": {"$ref": "#/components/schemas/Item"}}}
    assert to_parameters(schema, root=root)["properties"]["item"]["properties"]["isbn"] == {"type": "string"}


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "string"}, "top-level type is 'string'"),
    ("query: str", "not a JSON Schema object"),
    ({"type": "object", "properties": {"a": {"type": "str"}}, "required": ["b"]}, "required argument(s) b"),
    ({"type": "object", "properties": {"a": {"type": "date"}}}, "unknown type 'date'"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}, "external $ref"),
    ({"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}}, "recursive $ref"),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": "two"}}}, "not a valid JSON Schema"),
])
def test_unmappable_schemas_say_why(schema, why):
    with pytest.raises(Unmappable) as info:
        to_parameters(schema)
    assert why in str(info.value)


def test_missing_schema_is_an_empty_object_and_draft3_required_flags_are_lifted():
    assert to_parameters(None) == {"type": "object", "properties": {}}
    mapped = to_parameters({"properties": {"q": {"type": "string", "required": True}, "n": {"type": "integer"}}})
    assert mapped["required"] == ["q"] and "required" not in mapped["properties"]["q"]


def test_tool_names_are_sanitized_and_empty_names_are_unmappable():
    assert tool_name("get weather/now") == "get_weather_now"
    with pytest.raises(Unmappable):
        tool_name("  ")
    with pytest.raises(Unmappable):
        tool_name("???")


def test_openai_tool_keeps_a_usable_output_schema_only():
    tool = openai_tool("f", " does f ", {"type": "object", "properties": {}},
                       output={"type": "dict", "properties": {"x": {"type": "float"}}})
    assert tool["function"]["description"] == "does f"
    assert tool["output_schema"]["properties"]["x"]["type"] == "number"
    assert output_schema({"type": "nonsense"}) is None
