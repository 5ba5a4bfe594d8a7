"""Numeric settings are bounded: a flag out of range is a usage error naming it (exit 2), a config file's
value a one-line error naming the field (exit 1), before any record is read; in range, the stage runs."""

import dataclasses
import typing

import pytest
from astra_toolgraph.chains import SynthesisConfig
from astra_toolgraph.cli import main
from astra_toolgraph.configs import WalkConfig
from astra_toolgraph.evolve.config import EvolveConfig
from astra_toolgraph.filtering import FilterConfig
from astra_toolgraph.stages import GraphCommandConfig, RolloutCommandConfig, TasksConfig, VerifyChainsConfig
from astra_toolgraph.tasks import AugmentConfig
from click.testing import CliRunner
from toolgraph_helpers import write_jsonl

GRAPH = {"id": "graph-s", "server_id": "s", "nodes": ["a", "b"], "meta": {},
         "edges": [{"src": "a", "dst": "b", "weight": 1.0}]}


@pytest.mark.parametrize(("args", "message"), [
    (["walk", "--walks", "-1"], "'--walks': must be >= 1, got -1"),
    (["walk", "--min-length", "0"], "'--min-length': must be >= 1, got 0"),
    (["graph", "--schema-weight", "-1"], "'--schema-weight': must be >= 0, got -1.0"),
    (["graph", "--match-threshold", "7"], "'--match-threshold': must be between 0 and 1, got 7.0"),
    (["filter", "--min-tools", "-5"], "'--min-tools': must be >= 0, got -5"),
    (["rollout", "--emulator-failure-rate", "1.5"], "'--emulator-failure-rate': must be between 0 and 1, got 1.5"),
    (["rollout", "--samples", "0"], "'--samples': must be >= 1, got 0"),
    (["normalize", "--mcp-call-timeout-s", "0"], "'--mcp-call-timeout-s': must be >= 0.1, got 0.0"),
    (["evolve", "plans", "--plans", "0"], "'--plans': must be >= 1, got 0"),
    (["evolve", "rollout", "--max-user-turns", "-1"], "'--max-user-turns': must be >= 0, got -1"),
])
def test_a_flag_out_of_range_is_a_usage_error_naming_it(args, message):
    result = CliRunner().invoke(main, args, input="")
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_config_file_value_out_of_range_names_the_field(tmp_path):
    graphs = write_jsonl(tmp_path / "graphs.jsonl", [GRAPH])
    (tmp_path / "walk.yaml").write_text("walks: 0\n")
    result = CliRunner().invoke(main, ["walk", str(graphs), "--config", str(tmp_path / "walk.yaml")])
    assert result.exit_code == 1 and "config field walks: must be >= 1, got 0" in result.output
    result = CliRunner().invoke(main, ["walk", str(graphs), "--walks", "1", "--seed", "-3"])
    assert result.exit_code == 0 and '"tools":["a","b"]' in result.stdout.replace(" ", "")


def test_a_library_caller_gets_the_engines_bounds_checked_too():
    with pytest.raises(ValueError, match="config field max_user_turns: must be >= 0, got -1"):
        EvolveConfig(max_user_turns=-1)
    assert EvolveConfig(explore_turns=0, verify_calls=0).explore_turns == 0


CONFIGS = [WalkConfig, FilterConfig, SynthesisConfig, GraphCommandConfig, VerifyChainsConfig, TasksConfig,
           AugmentConfig, RolloutCommandConfig, EvolveConfig]


@pytest.mark.parametrize("config", CONFIGS, ids=[c.__name__ for c in CONFIGS])
def test_every_numeric_knob_but_a_seed_is_bounded(config):
    hints = typing.get_type_hints(config)
    unbounded = [f.name for f in dataclasses.fields(config) if "help" in f.metadata and "seed" not in f.name
                 and {int, float} & {hints[f.name], *typing.get_args(hints[f.name])} and "range" not in f.metadata]
    assert not unbounded, f"{config.__name__}: give {unbounded} minimum=/maximum="
