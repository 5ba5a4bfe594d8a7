"""astra-toolgraph: tool documents -> tool-chain graph -> walks -> tasks -> multi-turn trajectories
over real MCP servers and a tool emulator (ASTRA paper §2.1). Torch-free."""

from astra_toolgraph.chains import SynthesisConfig, synthesize_chains
from astra_toolgraph.emulator import EmulatorConfig, ToolEmulator
from astra_toolgraph.filtering import FilterConfig, filter_server
from astra_toolgraph.graph import GraphConfig, build_graph, schema_dependencies
from astra_toolgraph.mcp_client import CallOutcome, McpConnection, ServerPool
from astra_toolgraph.normalize import normalize_source
from astra_toolgraph.rollout import RolloutConfig, rollout
from astra_toolgraph.tasks import AugmentConfig, TaskConfig, augment_task, chain_tasks, server_tasks
from astra_toolgraph.verify import VerifyConfig, dependency_check, verify_chain
from astra_toolgraph.walks import CSRGraph, WalkConfig, walk_graphs

__all__ = [
    "AugmentConfig", "CSRGraph", "CallOutcome", "EmulatorConfig", "FilterConfig", "GraphConfig", "McpConnection",
    "RolloutConfig", "ServerPool", "SynthesisConfig", "TaskConfig", "ToolEmulator", "VerifyConfig", "WalkConfig",
    "augment_task", "build_graph", "chain_tasks", "dependency_check", "filter_server", "normalize_source", "rollout",
    "schema_dependencies", "server_tasks", "synthesize_chains", "verify_chain", "walk_graphs",
]
__version__ = "0.1.0"
