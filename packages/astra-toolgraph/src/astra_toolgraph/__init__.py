"""astra-toolgraph: tool documents -> tool-chain graph -> walks -> tasks -> multi-turn trajectories
over real MCP servers and a tool emulator (ASTRA paper §2.1). Torch-free."""

import importlib

# Names load on first use: `astra-toolgraph --help` must not pay for the MCP SDK or the LLM client.
_HOMES = {
    "SynthesisConfig": "chains", "synthesize_chains": "chains", "EmulatorConfig": "configs",
    "ToolEmulator": "emulator", "FilterConfig": "filtering", "filter_server": "filtering", "GraphConfig": "graph",
    "build_graph": "graph", "schema_dependencies": "graph", "CallOutcome": "mcp_client",
    "McpConnection": "mcp_client", "ServerPool": "mcp_client", "normalize_source": "normalize",
    "RolloutConfig": "configs", "rollout": "rollout", "AugmentConfig": "tasks", "TaskConfig": "tasks",
    "augment_task": "tasks", "chain_tasks": "tasks", "server_tasks": "tasks", "VerifyConfig": "verify",
    "dependency_check": "verify", "verify_chain": "verify", "CSRGraph": "walks", "WalkConfig": "configs",
    "walk_graphs": "walks",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f"astra_toolgraph.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'astra_toolgraph' has no attribute {name!r}")


__all__ = [
    "AugmentConfig", "CSRGraph", "CallOutcome", "EmulatorConfig", "FilterConfig", "GraphConfig", "McpConnection",
    "RolloutConfig", "ServerPool", "SynthesisConfig", "TaskConfig", "ToolEmulator", "VerifyConfig", "WalkConfig",
    "augment_task", "build_graph", "chain_tasks", "dependency_check", "filter_server", "normalize_source", "rollout",
    "schema_dependencies", "server_tasks", "synthesize_chains", "verify_chain", "walk_graphs",
]
__version__ = "0.1.0"
