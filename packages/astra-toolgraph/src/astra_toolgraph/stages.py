"""What each `astra-toolgraph` stage does to one record: the commands' configs and per-record functions.

The command line (`cli.py`) only declares them; a library user calls the same functions, e.g.

    from astra_toolgraph.stages import TasksConfig, tasks_of
    tasks = await tasks_of(chain, TasksConfig(per_chain=2), llm, servers={server["id"]: server})
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass

from astra_core.config import knob
from astra_core.stage import Malformed, Rejected, require_text

from astra_toolgraph.chains import SynthesisConfig, chain_record, synthesize_chains
from astra_toolgraph.configs import EmulatorConfig, RolloutConfig, WalkConfig
from astra_toolgraph.graph import GraphConfig, build_graph
from astra_toolgraph.normalize import ASTRA_RECORD, OPENAPI_SPEC
from astra_toolgraph.tasks import AugmentConfig, TaskConfig, augment_task, chain_tasks, server_tasks
from astra_toolgraph.verify import VerifyConfig, verify_chain

SERVERS_HELP = "tool_server records the inputs refer to (repeatable)."


# -- shared settings and resources -------------------------------------------------------------------

@dataclass
class McpConfig:
    mcp_call_timeout_s: float = knob(60.0, "Seconds per request to a live MCP server (tools/list, tools/call).",
                                     minimum=0.1)
    server_log: str | None = knob(None, "Append started MCP servers' stderr to this file (default: ours).", path=True)


@contextlib.contextmanager
def server_errlog(config: McpConfig, options=None):
    """Where started MCP servers write their stderr: the --server-log file, or ours."""
    from astra_toolgraph.mcp_client import default_errlog

    if config.server_log is None:
        yield default_errlog()
    else:
        with open(config.server_log, "a", encoding="utf-8") as handle:
            yield handle


@contextlib.asynccontextmanager
async def server_pool(config: McpConfig, options=None):
    """Connections to the live MCP servers episodes call, closed on the run's event loop."""
    from astra_toolgraph.mcp_client import ServerPool

    with server_errlog(config) as errlog:
        pool = ServerPool(timeout_s=config.mcp_call_timeout_s, errlog=errlog)
        try:
            yield pool
        finally:
            await pool.aclose()


def server_of(record: dict, servers: dict[str, dict]) -> dict:
    server = servers.get(record["server_id"])
    if server is None:
        raise Rejected(f"server {record['server_id']!r} is not in --servers")
    return server


# -- normalize -----------------------------------------------------------------------------------------

_STRING = {"type": "string"}
_STRINGS = {"type": "array", "items": _STRING}
_MCP_SERVER = {
    "type": "object",
    "properties": {"name": _STRING, "command": _STRING, "args": _STRINGS, "url": _STRING, "cwd": _STRING,
                   "env": {"type": "object", "additionalProperties": _STRING},
                   "headers": {"type": "object", "additionalProperties": _STRING},
                   "transport": {"$ref": "https://astra-toolkit.dev/schemas/tool_server.json#/properties/transport"}},
}
TOOL_SOURCE = {
    "title": "tool source",
    "description": "Where tools are documented: a live MCP server (`command`+`args` or `url`), a line of ASTRA's "
                   "mcp_servers.jsonl, an OpenAI function list, BFCL function docs or an OpenAPI spec.",
    "type": "object",
    "properties": {**_MCP_SERVER["properties"], **ASTRA_RECORD["properties"], **OPENAPI_SPEC["properties"],
                   "id": _STRING, "format": _STRING, "path": _STRING, "domain": _STRING, "description": _STRING,
                   "functions": {"type": "array"}, "tools": {"type": "array"},
                   "include_tools": _STRINGS, "exclude_tools": _STRINGS,
                   "mcpServers": {"type": "object", "additionalProperties": _MCP_SERVER}},
}


async def normalize(source: dict, config: McpConfig, errlog) -> list[dict]:
    """Tool documents -> tool_server records (OpenAI tool schemas + how to call the server).

    Each input line is a source: a live MCP server (stdio command or streamable-HTTP URL; asked
    tools/list), a line of ASTRA's mcp_servers.jsonl, an OpenAI function list, BFCL function docs,
    or an OpenAPI spec. `astra-toolgraph samples` prints the bundled example sources."""
    from astra_toolgraph.mcp_client import McpUnavailable
    from astra_toolgraph.normalize import SourceError, normalize_source

    try:
        return await normalize_source(source, timeout_s=config.mcp_call_timeout_s, errlog=errlog)
    except SourceError as exc:
        raise Rejected(f"source: {exc}") from None
    except McpUnavailable as exc:
        raise Rejected(f"unreachable: {exc}") from None


# -- synthesize-chains -----------------------------------------------------------------------------------

async def synthesize_server_chains(server: dict, config: SynthesisConfig, llm) -> list[dict]:
    """tool_server -> tool_chain records: LLM joint synthesis of (task, chain) pairs per server."""
    return await synthesize_chains(llm, server, config, llm.config.seed)


# -- graph ---------------------------------------------------------------------------------------------

@dataclass
class GraphCommandConfig(GraphConfig):
    chains: list[str] = knob([], "tool_chain records (synthesize-chains output) whose consecutive pairs weight "
                                 "the edges (repeatable).", path=True)


@contextlib.contextmanager
def chains_by_server(config: GraphCommandConfig, options=None):
    """The tool lists of the --chains records, by server id."""
    from astra_core.jsonl import read_jsonl

    found: dict[str, list[list[str]]] = defaultdict(list)
    for path in config.chains:
        for chain in read_jsonl(path, kind="tool_chain"):
            found[chain["server_id"]].append(chain["tools"])
    yield found


def graph_of(server: dict, config: GraphCommandConfig, chains: dict[str, list[list[str]]]) -> dict:
    """tool_server -> tool_graph: transition graph weighted by chain pair counts, plus schema edges."""
    record = build_graph(server, chains.get(server["id"], []), config)
    if not record["edges"]:
        raise Rejected("no edges: no chain pairs and no schema dependencies between its tools")
    return record


# -- walk ----------------------------------------------------------------------------------------------

def walk_batch(graphs: list[dict], config: WalkConfig) -> list[list[dict] | Rejected]:
    """tool_graph -> tool_chain records: length-bounded weighted random walks (seeded, vectorized over a
    batch of graphs)."""
    from astra_toolgraph.walks import CSRGraph, unknown_endpoint, walk_graphs

    problems = [unknown_endpoint(g) for g in graphs]  # an edge to a tool the graph does not have: malformed
    sound = [g for g, problem in zip(graphs, problems, strict=True) if problem is None]
    walked = iter(walk_graphs([CSRGraph.from_record(g) for g in sound], [g["server_id"] for g in sound], config))
    return [Malformed(problem[1], field=problem[0]) if problem else _chains_of(graph, next(walked), config)
            for graph, problem in zip(graphs, problems, strict=True)]


def _chains_of(graph: dict, walked, config: WalkConfig) -> list[dict] | Rejected:
    from astra_toolgraph.walks import as_lists

    walked = as_lists(walked)
    if not walked:
        return Rejected(f"no walk of at least {config.min_length} tools (too few edges)")
    return [chain_record(graph["server_id"], [graph["nodes"][n] for n in nodes], origin="walk", task=None,
                         parent=graph, count=count) for nodes, count in walked]


# -- verify-chains ---------------------------------------------------------------------------------------

@dataclass
class VerifyChainsConfig(VerifyConfig):
    servers: list[str] = knob([], SERVERS_HELP, path=True)


async def verify(chain: dict, config: VerifyChainsConfig, llm, servers: dict[str, dict]) -> dict:
    """tool_chain -> tool_chain: dependency and coherence checks; failures go to --rejects."""
    return await verify_chain(llm, chain, server_of(chain, servers), config)


# -- tasks and augment -----------------------------------------------------------------------------------

@dataclass
class TasksConfig(TaskConfig):
    servers: list[str] = knob([], "tool_server records of the input chains' servers (repeatable).", path=True)


TASK_SOURCE = {
    "title": "tool_chain or tool_server",
    "description": "A tool_chain (chain-conditioned tasks; it names its server_id) or a tool_server (server-only "
                   "tasks) record, each checked as its kind.",
    "type": "object",
    "if": {"required": ["server_id"]},
    "then": {"$ref": "https://astra-toolkit.dev/schemas/tool_chain.json"},
    "else": {"$ref": "https://astra-toolkit.dev/schemas/tool_server.json"},
}


def _record_kind(record: dict) -> str:
    return "tool_chain" if "server_id" in record else "tool_server"  # (read as TASK_SOURCE: checked as its kind)


async def tasks_of(record: dict, config: TasksConfig, llm, servers: dict[str, dict]) -> list[dict]:
    """tool_chain -> chain-conditioned tasks; tool_server -> server-only tasks (inputs may mix both)."""
    if _record_kind(record) == "tool_server":
        return await server_tasks(llm, record, config)
    return await chain_tasks(llm, record, server_of(record, servers), config)


async def augment(task: dict, config: AugmentConfig, llm) -> list[dict]:
    """task -> task: the originals plus rewrites along diversity, complexity and persona."""
    return await augment_task(llm, task, config)


# -- rollout ---------------------------------------------------------------------------------------------

@dataclass
class RolloutCommandConfig(McpConfig, EmulatorConfig, RolloutConfig):
    servers: list[str] = knob([], "tool_server records of the tasks' servers (repeatable).", path=True)

    def __post_init__(self) -> None:
        self.emulator = EmulatorConfig(failure_rate=self.failure_rate, seed=self.seed, max_tokens=self.max_tokens)
        super().__post_init__()


async def roll_out(task: dict, config: RolloutCommandConfig, llm, pool, servers: dict[str, dict]) -> list[dict]:
    """task -> trajectory: multi-turn tool use on real MCP servers and the stateful emulator.

    A task whose question is empty or only whitespace is malformed input (there is no request to act on)."""
    from astra_toolgraph.rollout import rollout

    require_text(task, "question", "a task is a user's request, and there is nothing to act on")
    server = server_of(task, servers)
    return [await rollout(llm, task, server, pool, config, sample) for sample in range(config.samples)]
