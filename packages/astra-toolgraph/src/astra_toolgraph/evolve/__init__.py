"""AReaL-SEA's self-evolving data engine (paper §4): diversified plans, task synthesis with
executable checkers, task verification, rollouts with a user simulator, trajectory verification
with TASK/TRAJECTORY attribution, reflection; K iterations per independent stream."""

import importlib

# Names load on first use: declaring `astra-toolgraph evolve` must not import the agents.
_HOMES = {
    "EvolveConfig": "config", "Domain": "domains", "domain_of": "domains", "rl_sample_record": "export",
    "user_sft_record": "export", "AgentFailed": "plans", "generate_plans": "plans", "reflect": "reflection",
    "StreamResult": "stream", "run_stream": "stream", "replay": "tasks", "synthesize_task": "tasks",
    "verify_task": "tasks", "check_trajectory": "trajectories", "roll_out": "trajectories",
    "verify_trajectory": "trajectories",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f"astra_toolgraph.evolve.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'astra_toolgraph.evolve' has no attribute {name!r}")


__all__ = sorted(_HOMES)
