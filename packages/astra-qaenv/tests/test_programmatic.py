"""Programmatic synthesis on the bundled knowledge base (no LLM, no sandbox: the sandbox tests are separate)."""

import collections
import json

import pytest
from astra_core.schema import validate
from astra_qaenv.kb import KBError, load_kb, lookup_key
from astra_qaenv.lookup import MergeConflict, merge_rows, render_lookup
from astra_qaenv.programmatic import ProgrammaticConfig, synthesize_from, why_nothing
from astra_qaenv.trace import SCENARIOS, depth, scenario_of, structural_problems
from astra_reward import contains_answer
from qaenv_helpers import read, write


@pytest.fixture(scope="module")
def kb():
    return load_kb()


@pytest.fixture(scope="module")
def instances(kb):
    config = ProgrammaticConfig(max_hops=3, per_entity=2)
    return [r for e in kb.entities.values() for r in synthesize_from(kb, e, config)]


def test_bundled_kb_spans_domains_and_tools(kb):
    domains = {e["domain"] for e in kb.entities.values()}
    tools = {f.tool for fields in kb.fields.values() for f in fields.values()}
    assert len(domains) >= 5 and len(tools) >= 40
    assert all(f.domain == kb.entities[next(iter(e["id"] for e in kb.of_type(f.type)))]["domain"]
               for fields in kb.fields.values() for f in fields.values())


def test_dozens_of_instances_of_every_scenario_type(instances):
    counts = collections.Counter(r["scenario_type"] for r in instances)
    assert set(counts) == set(SCENARIOS)
    assert all(n >= 20 for n in counts.values()), counts
    assert len({r["id"] for r in instances}) == len(instances)


def test_instances_are_well_formed_and_grounded(instances, kb):
    for record in instances:
        validate(record, "qa_instance")
        trace = record["decomposition_trace"]
        assert structural_problems(trace) == []
        assert scenario_of(trace) == record["scenario_type"]
        assert 1 <= depth(trace) <= 3
        for step in trace:
            if step["needs_tool"]:
                source, call = step["tool_source"], step["tool_call"]
                subject = call["arguments"][source["param"]]
                # the asked row is in the tool's table, and its value is the sub-answer
                assert str(source["rows"][subject]) == step["sub_answer"]
                assert call["name"] == source["tool"]["function"]["name"]
            else:  # only comparison leaves are tool-free
                assert not any(step["_uuid"] in (s["dependency"] or []) for s in trace)
            assert contains_answer(record["final_answer"], step["sub_answer"])


def test_multi_hop_chains_feed_answers_forward(instances):
    chains = [r for r in instances if r["scenario_type"] == "Multi-Hop"]
    for record in chains:
        trace = record["decomposition_trace"]
        for previous, step in zip(trace, trace[1:], strict=False):
            assert step["dependency"] == [previous["_uuid"]]
            assert previous["sub_answer"] in step["sub_question"]


def test_same_seed_same_instances_other_seed_differs(kb):
    entity = kb.of_type("country")[0]
    a = synthesize_from(kb, entity, ProgrammaticConfig(seed=1, per_entity=4))
    b = synthesize_from(kb, entity, ProgrammaticConfig(seed=1, per_entity=4))
    c = synthesize_from(kb, entity, ProgrammaticConfig(seed=2, per_entity=4))
    strip = lambda rs: [{k: v for k, v in r.items() if k != "meta"} for r in rs]  # noqa: E731
    assert strip(a) == strip(b) and strip(a) != strip(c)


def test_hop_budget_is_respected_or_explained(kb):
    config = ProgrammaticConfig(min_hops=3, max_hops=3, scenarios=("Multi-Hop",))
    product = kb.of_type("product")[0]
    for record in synthesize_from(kb, product, config):
        assert depth(record["decomposition_trace"]) == 3
    # an entity type with no relation path long enough yields nothing, and the reason says why
    config = ProgrammaticConfig(min_hops=4, max_hops=4, scenarios=("Multi-Hop",), tries=4)
    agency = kb.of_type("agency")[0]
    if not synthesize_from(kb, agency, config):
        reason = why_nothing(kb, agency, config)
        assert "hop budget 4-4" in reason and "headquarters" in reason
    assert "not in the knowledge base" in why_nothing(kb, {"id": "nope"}, config)


def test_lookup_code_answers_and_reports_unknown_names(kb):
    field = kb.fields["city"]["population"]
    rows = kb.table(field)
    source = {"kind": "lookup", "tool": {"type": "function", "function": {"name": field.tool, "description": "d",
                                                                           "parameters": {}}},
              "param": field.param, "field": field.name, "noun": "city", "rows": rows}
    namespace = {}
    exec(render_lookup(source), namespace)  # our own generated code; the sandbox tests run it jailed
    name, value = next(iter(rows.items()))
    assert namespace[field.tool](city=f"  {name.upper()} ") == {"city": name, "population": value}
    assert "no city named" in namespace[field.tool](city="Atlantis")["error"]
    assert "non-empty string" in namespace[field.tool](city=3)["error"]


def test_merge_rows_unions_and_refuses_conflicts():
    base = {"rows": {"A": 1, "B": 2}}
    assert merge_rows(base, {"rows": {"C": 3, "B": 2}})["rows"] == {"A": 1, "B": 2, "C": 3}
    with pytest.raises(MergeConflict, match="'B' is 2"):
        merge_rows(base, {"rows": {"B": 5}})


def write_kb(tmp_path, entities, relations):
    (tmp_path / "entities.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entities))
    (tmp_path / "relations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in relations))
    return tmp_path


def test_kb_without_schema_gets_default_phrases(tmp_path):
    kb = load_kb(write_kb(tmp_path, [
        {"id": "p/1", "type": "planet", "name": "Zorb", "domain": "space", "attributes": {"moons": 3}},
        {"id": "s/1", "type": "star", "name": "Kel", "domain": "space", "attributes": {"spectral_class": "G"}}],
        [{"subject": "p/1", "relation": "orbits", "object": "s/1"}]))
    orbits = kb.fields["planet"]["orbits"]
    assert orbits.tool == "get_planet_orbits" and orbits.target_type == "star"
    (record,) = synthesize_from(kb, kb.entities["p/1"], ProgrammaticConfig(scenarios=("Multi-Hop",)))
    assert record["main_question"] == "What is the spectral class of the orbits of Zorb?"
    assert [s["sub_answer"] for s in record["decomposition_trace"]] == ["Kel", "G"]
    assert lookup_key("  Kel  Star ") == "kel star"


@pytest.mark.parametrize("entities,relations,message", [
    ([{"id": "a", "type": "t", "name": "X"}, {"id": "b", "type": "t", "name": "x "}], [], "both named"),
    ([{"id": "a", "type": "t", "name": "X"}], [{"subject": "a", "relation": "r", "object": "zz"}], "unknown entity"),
    ([{"id": "a", "type": "t", "name": "X"}, {"id": "b", "type": "t", "name": "Y"}],
     [{"subject": "a", "relation": "r", "object": "b"}, {"subject": "a", "relation": "r", "object": "a"}],
     "two 'r' objects"),
])
def test_kb_errors_name_the_problem(tmp_path, entities, relations, message):
    with pytest.raises(KBError, match=message):
        load_kb(write_kb(tmp_path, entities, relations))


def test_the_command_rejects_a_wrong_typed_entity_by_line_and_field(cli, tmp_path):
    starts = write(tmp_path / "starts.jsonl", [{"id": "country/valdoria"}, {"id": 5}, {"id": "city/atlantis"}])
    stopped = cli("programmatic", starts)
    assert stopped.exit_code == 1 and f"{starts}:2: field id:" in stopped.stderr, stopped.stderr
    kept = cli("programmatic", starts, "--skip-bad", "-o", tmp_path / "qa.jsonl", "--rejects", tmp_path / "rej.jsonl")
    assert kept.exit_code == 0, kept.stderr
    assert {r["meta"]["parent_id"] for r in read(tmp_path / "qa.jsonl")} == {"country/valdoria"}
    wrong_type, unknown = read(tmp_path / "rej.jsonl")
    assert wrong_type["source"] == f"{starts}:2" and "field id:" in wrong_type["reason"] and " 5" in wrong_type["reason"]
    assert unknown["id"] == "city/atlantis" and "not in the knowledge base" in unknown["reason"]


def test_config_file_and_flags_set_the_knobs_and_bad_values_name_the_field(cli, tmp_path):
    starts = write(tmp_path / "starts.jsonl", [{"id": "country/valdoria"}])
    config = tmp_path / "programmatic.yaml"
    config.write_text("per_entity: 3\nscenarios: [Single-Hop, Multi-Hop]\n")
    result = cli("programmatic", starts, "--config", config, "--per-entity", "2", "-o", tmp_path / "qa.jsonl")
    assert result.exit_code == 0, result.stderr
    made = read(tmp_path / "qa.jsonl")
    assert len(made) == 2 and {r["scenario_type"] for r in made} <= {"Single-Hop", "Multi-Hop"}  # the flag wins
    bad = cli("programmatic", starts, "--scenarios", "Single-Hop,Bogus")
    assert bad.exit_code == 1 and "config field scenarios: unknown scenario type(s) ['Bogus']" in bad.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--per-entity", "-1"], "Invalid value for '--per-entity': must be >= 1, got -1"),
    (["--table-rows", "-2"], "Invalid value for '--table-rows': must be >= -1, got -2"),
    (["--tries", "0"], "Invalid value for '--tries': must be >= 1, got 0"),
])
def test_numeric_knobs_out_of_range_are_usage_errors(cli, tmp_path, args, says):
    starts = write(tmp_path / "starts.jsonl", [{"id": "country/valdoria"}])
    bad = cli("programmatic", starts, *args)
    assert bad.exit_code == 2 and says in bad.stderr, bad.stderr
    config = tmp_path / "programmatic.yaml"
    config.write_text("per_entity: -1\n")
    from_file = cli("programmatic", starts, "--config", config)
    assert from_file.exit_code == 1 and "config field per_entity: must be >= 1, got -1" in from_file.stderr
    crossed = cli("programmatic", starts, "--min-hops", "3", "--max-hops", "2")
    assert crossed.exit_code == 1 and "config field min_hops: 3 is above max_hops 2" in crossed.stderr


@pytest.mark.parametrize("bad_file,row,where", [
    ("entities.jsonl", {"id": "s/2", "type": "star", "name": "Vel", "attributes": "x"}, "entities.jsonl:3: record 's/2': field attributes:"),
    ("entities.jsonl", {"id": "s/2", "type": "star", "name": "Vel", "attributes": {"mass": {"kg": 1}}},
     "entities.jsonl:3: record 's/2': field attributes.mass:"),
    ("entities.jsonl", {"id": "s/1", "type": "star", "name": "Vel"}, "entities.jsonl:3: field id: duplicate entity id 's/1' (first at"),
    ("relations.jsonl", {"subject": "p/1", "relation": 5, "object": "s/1"}, "relations.jsonl:2: field relation:"),
    ("relations.jsonl", {"subject": "p/1", "relation": "near", "object": "s/9"}, "relations.jsonl:2: field object:"),
    ("schema.jsonl", {"type": "planet", "field": "moons", "lower_wins": "yes"}, "schema.jsonl:1: field lower_wins:"),
    ("schema.jsonl", {"type": "planet", "field": "moons", "phrase": "the moons of {planet}"}, "schema.jsonl:1: field phrase:"),
    ("schema.jsonl", {"type": "planet", "field": "moons", "tool": "get moons"}, "schema.jsonl:1: field tool:"),
])
def test_a_bad_kb_file_stops_the_command_naming_its_file_line_and_field(cli, tmp_path, bad_file, row, where):
    kb = tmp_path / "kb"
    kb.mkdir()
    write_kb(kb, [{"id": "p/1", "type": "planet", "name": "Zorb", "domain": "space", "attributes": {"moons": 3}},
                  {"id": "s/1", "type": "star", "name": "Kel", "domain": "space", "attributes": {"spectral_class": "G"}}],
             [{"subject": "p/1", "relation": "orbits", "object": "s/1"}])
    starts = write(tmp_path / "starts.jsonl", [{"id": "p/1"}])
    good = cli("programmatic", starts, "--kb", kb, "-o", tmp_path / "qa.jsonl")
    assert good.exit_code == 0 and read(tmp_path / "qa.jsonl"), good.stderr
    with open(kb / bad_file, "a") as handle:
        handle.write(json.dumps(row) + "\n")
    result = cli("programmatic", starts, "--kb", kb, "-o", tmp_path / "qa.jsonl")
    assert result.exit_code == 1, result.stderr
    assert result.stderr.startswith(f"astra-qaenv programmatic: {kb / where}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
