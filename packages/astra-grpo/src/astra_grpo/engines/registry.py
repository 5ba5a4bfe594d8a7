"""Engine kinds by name: `config.engine` picks the factory that builds the run's engine.

A factory is called as `factory(config, policy, tokenizer, renderer, version=..., halt=...)` and returns an
`Engine`: `config` the run's GRPOConfig (max_staleness > 0: the engine generates while the trainer updates),
`policy` the unwrapped model, `renderer` the ChatRenderer (its `stop_ids` end a turn), `version` the policy
version it starts at (a resumed step), `halt` a threading.Event set when the run ends (an engine waiting on
work gives up). Kinds come from three places, later ones winning: the built-in ones below, the entry point
group `astra_grpo.engines` of installed packages (`name = "package.module:factory"`), and `register_engine`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points

ENTRY_POINTS = "astra_grpo.engines"
# Named, not imported: the factories' modules import torch (and vLLM), which `--help` and config checks must not.
BUILT_IN = {"transformers": "astra_grpo.engines.transformers:make_transformers_engine",
            "vllm": "astra_grpo.engines.vllm:make_vllm_engine"}

EngineFactory = Callable[..., "Engine"]  # noqa: F821 - see the module doc for its arguments
_registered: dict[str, EngineFactory] = {}


def register_engine(name: str, factory: EngineFactory) -> None:
    """Make `engine: name` build its engine with `factory` (replacing a kind of that name)."""
    _registered[name] = factory


def engine_kinds() -> list[str]:
    """Every engine name a config may choose."""
    return sorted({*BUILT_IN, *(point.name for point in entry_points(group=ENTRY_POINTS)), *_registered})


def engine_factory(name: str) -> EngineFactory:
    if name in _registered:
        return _registered[name]
    for point in entry_points(group=ENTRY_POINTS, name=name):
        return point.load()
    if name in BUILT_IN:
        module, attribute = BUILT_IN[name].split(":")
        return getattr(importlib.import_module(module), attribute)
    raise ValueError(f"unknown engine kind {name!r}; known: {' | '.join(engine_kinds())}")


def make_engine(config, policy, tokenizer, renderer, version: int = 0, halt=None):
    """The engine `config.engine` names, for `policy`, starting at policy `version`."""
    return engine_factory(config.engine)(config, policy, tokenizer, renderer, version=version, halt=halt)
