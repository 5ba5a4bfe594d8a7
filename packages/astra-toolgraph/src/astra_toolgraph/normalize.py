"""Tool documents from heterogeneous sources -> one `tool_server` record per server (paper §2.1.1).

A *source* is one JSON object (one line of the `normalize` input). Its format is given by
`"format"` or recognized from its fields:

| format    | a source looks like                                                                  |
|-----------|--------------------------------------------------------------------------------------|
| `mcp`     | `{"name", "transport": {"kind": "stdio", "command", "args"} or {"kind": "http", "url"}}`, |
|           | `{"name", "command", "args"}`, `{"name", "url"}`, or `{"mcpServers": {name: {...}}}`  |
|           | (a Claude-desktop style config): the live server is asked `tools/list`.              |
| `astra`   | a line of ASTRA's `mcp_servers.jsonl`: `base_info.group_info`, `base_info.tool_list`, |
|           | `call_info` (optionally wrapped in `mcp_info`).                                      |
| `openai`  | `{"name", "functions": [...]}` / `"tools"` / `"path"`: an OpenAI function list.      |
| `bfcl`    | `{"name", "path"}` or `"functions"`: BFCL function docs (JSON lines or a JSON list). |
| `openapi` | `{"path"}` (JSON or YAML) or an inline spec with an `"openapi"`/`"swagger"` key.     |

Tools that cannot be mapped to the OpenAI format are kept aside in `unmapped_tools` with the
reason; `filter` reports them. Relative `path`s resolve against the current directory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO, Any

from astra_core.schema import RecordError, validate

from astra_toolgraph.schema_map import Unmappable, openai_tool

FORMATS = ("mcp", "astra", "openai", "bfcl", "openapi")
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


class SourceError(ValueError):
    """A source that is not one of the known formats, or whose document cannot be read."""


_TEXT = {"type": ["string", "null"]}
_ASTRA_INFO = {
    "type": "object",
    "properties": {
        "base_info": {"type": "object", "properties": {
            "group_info": {"type": "object", "properties": dict.fromkeys(
                ("server_name", "server_title", "server_description", "domain"), _TEXT)},
            "tool_list": {"type": ["array", "null"]}}},
        "call_info": {"type": "object", "properties": {
            "command": _TEXT, "args": {"type": ["array", "null"], "items": {"type": "string"}}}},
    },
}
ASTRA_RECORD = {
    "title": "ASTRA server record",
    "description": "A line of ASTRA's mcp_servers.jsonl: base_info.group_info, base_info.tool_list, call_info "
                   "(optionally wrapped in mcp_info).",
    **_ASTRA_INFO,
    "properties": {**_ASTRA_INFO["properties"], "mcp_info": _ASTRA_INFO},
}


_STRING = {"type": "string"}
OPENAPI_SPEC = {
    "title": "OpenAPI document",
    "type": "object",
    "properties": {
        "paths": {"type": "object", "additionalProperties": {"type": "object"}},
        "info": {"type": "object", "properties": {"title": _STRING, "description": _STRING}},
        "servers": {"type": "array", "items": {"type": "object", "properties": {"url": _STRING}}},
    },
}


def _checked(document: Any, shape: dict, where: str) -> Any:
    """`document` if it has `shape`; else a SourceError naming `where` and the field."""
    try:
        return validate(document, shape)
    except RecordError as exc:
        raise SourceError(f"{where}: field {exc.field}: {exc.message}") from None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "server"


def detect_format(source: dict) -> str:
    declared = source.get("format")
    if declared:
        if declared not in FORMATS:
            raise SourceError(f"unknown format {declared!r}; known: {', '.join(FORMATS)}")
        return declared
    if "base_info" in source or "mcp_info" in source:
        return "astra"
    if "openapi" in source or "swagger" in source:
        return "openapi"
    if any(k in source for k in ("transport", "command", "url", "mcpServers")):
        return "mcp"
    if "functions" in source or "tools" in source:
        return "openai"
    if source.get("path") and _is_openapi(_read_document(source["path"])):
        return "openapi"
    raise SourceError("cannot tell the source format: give \"format\" (one of " + ", ".join(FORMATS) + ")"
                      + ("; a path is recognised on its own only when it holds an OpenAPI spec" if source.get("path")
                         else ""))


def _is_openapi(document: Any) -> bool:
    return isinstance(document, dict) and ("openapi" in document or "swagger" in document)


def _read_document(path: str) -> Any:
    file = Path(path)
    if not file.exists():
        raise SourceError(f"document {path} does not exist")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"document {path} cannot be read: {exc}") from None
    if file.suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SourceError(f"{path}: not YAML: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        try:  # JSON lines (BFCL function docs are stored this way)
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise SourceError(f"{path}: neither JSON nor JSON lines: {exc}") from None


def _server(source: dict, fmt: str, *, name: str, description: str, tools: list[dict], unmapped: list[dict],
            transport: dict, domain: str | None = None, **source_extra: Any) -> dict:
    record_id = source.get("id") or slug(name)
    origin = {"format": fmt, **{k: v for k, v in source_extra.items() if v is not None}}
    if source.get("path"):
        origin["path"] = source["path"]
    return {"id": record_id, "name": name, "description": description or "",
            "domain": domain or source.get("domain") or "unknown", "tools": tools, "transport": transport,
            "source": origin, "unmapped_tools": unmapped, "meta": {"provenance": []}}


def _map_tools(entries: list, build) -> tuple[list[dict], list[dict]]:
    """Apply `build(entry) -> tool` to each tool document; unmappable ones are set aside with the reason."""
    tools, unmapped = [], []
    for index, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        try:
            if not isinstance(entry, dict):
                raise Unmappable(f"tool document #{index} is a {type(entry).__name__}, not an object")
            tools.append(build(entry))
        except Unmappable as exc:
            unmapped.append({"name": name if isinstance(name, str) else f"#{index}", "reason": str(exc)})
    return tools, unmapped


# -- ASTRA mcp_servers.jsonl --------------------------------------------------------------------
def _astra_transport(call_info: dict) -> dict:
    """ASTRA's call_info: `url` (+ `headers`) is a streamable-HTTP server; `mock_tool`, a Smithery URL
    template needing account keys, or nothing at all means the tools are documents only (emulated)."""
    url = call_info.get("url")
    if call_info.get("command"):
        return {"kind": "stdio", "command": call_info["command"], "args": list(call_info.get("args") or [])}
    if isinstance(url, str) and url and "{" not in url and "mock_tool" not in call_info:
        transport = {"kind": "http", "url": url}
        if call_info.get("headers"):
            transport["headers"] = call_info["headers"]
        return transport
    return {"kind": "doc_only"}


def _astra_lines(path: str) -> list[dict]:
    """The records of an ASTRA mcp_servers.jsonl file, each checked to be one."""
    document = _read_document(path)
    lines = document if isinstance(document, list) else [document]
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, dict) or ("base_info" not in line and "mcp_info" not in line):
            found = f"keys {', '.join(map(str, line))}" if isinstance(line, dict) else f"a {type(line).__name__}"
            raise SourceError(f"{path} is not in astra format: record #{number} has no base_info or mcp_info "
                              f"(found {found})")
        _checked(line, ASTRA_RECORD, f"{path} record #{number}")
    return lines


def from_astra(source: dict) -> list[dict]:
    """One server per ASTRA record; a source with only a `path` stands for every line of that file."""
    if "base_info" not in source and "mcp_info" not in source:
        if not source.get("path"):
            raise SourceError("an astra source needs base_info (a record) or path (a mcp_servers.jsonl file)")
        return [server for line in _astra_lines(source["path"])
                for server in from_astra({**line, "path": source["path"]})]
    info = source.get("mcp_info", source)
    base = info.get("base_info") or {}
    group = base.get("group_info") or {}
    name = group.get("server_name") or group.get("server_title") or group.get("name") or group.get("group_id")
    if not name:
        raise SourceError("ASTRA record has no base_info.group_info.server_name/server_title")
    name = str(name)  # (a numeric group_id names a server too)

    def build(entry: dict) -> dict:
        schema = entry.get("parameters", entry.get("inputSchema", entry.get("input_schema")))
        output = entry.get("outputSchema", entry.get("output_schema"))
        return openai_tool(entry.get("name"), entry.get("description"), schema, output=output)

    tools, unmapped = _map_tools(base.get("tool_list") or [], build)
    return [_server(source, "astra", name=name, description=group.get("server_description", ""), tools=tools,
                    unmapped=unmapped, transport=_astra_transport(info.get("call_info") or {}),
                    domain=group.get("domain"), title=group.get("server_title"), call_info=info.get("call_info"))]


# -- OpenAI function lists and BFCL function docs -------------------------------------------------
def _function_entries(source: dict) -> list:
    entries = source.get("functions", source.get("tools"))
    if entries is None and source.get("path"):
        entries = _read_document(source["path"])
        if isinstance(entries, dict):
            entries = entries.get("functions", entries.get("tools", [entries]))
    if not isinstance(entries, list):
        raise SourceError("no function list: give \"functions\" (a list) or \"path\" to a JSON file of them")
    return entries


def _source_name(source: dict, fallback: str) -> str:
    if source.get("name"):
        return source["name"]
    if source.get("path"):
        return Path(source["path"]).stem
    return fallback


def from_openai(source: dict) -> list[dict]:
    def build(entry: dict) -> dict:
        function = entry.get("function", entry) if entry.get("type") == "function" else entry
        return openai_tool(function.get("name"), function.get("description"), function.get("parameters"),
                           output=entry.get("output_schema"))

    tools, unmapped = _map_tools(_function_entries(source), build)
    return [_server(source, "openai", name=_source_name(source, "openai-functions"),
                    description=source.get("description", ""), tools=tools, unmapped=unmapped,
                    transport=source.get("transport") or {"kind": "doc_only"})]


def from_bfcl(source: dict) -> list[dict]:
    def build(entry: dict) -> dict:  # BFCL: parameters {"type": "dict", ...}; `response` documents the output
        return openai_tool(entry.get("name"), entry.get("description"), entry.get("parameters"),
                           output=entry.get("response"))

    tools, unmapped = _map_tools(_function_entries(source), build)
    return [_server(source, "bfcl", name=_source_name(source, "bfcl-functions"),
                    description=source.get("description", ""), tools=tools, unmapped=unmapped,
                    transport={"kind": "doc_only"})]


# -- OpenAPI -----------------------------------------------------------------------------------
def _operation_parameters(spec: dict, path_item: dict, operation: dict) -> dict:
    """Path and query parameters plus the JSON request body as one object schema."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in [*path_item.get("parameters", []), *operation.get("parameters", [])]:
        if "$ref" in param:
            ref = param["$ref"]
            param = spec.get("components", {}).get("parameters", {}).get(ref.rsplit("/", 1)[-1])
            if param is None:
                raise Unmappable(f"parameter $ref {ref!r} points nowhere")
        if param.get("in") not in ("path", "query"):
            continue  # headers and cookies carry credentials/transport concerns, not task arguments
        schema = dict(param.get("schema") or {k: param[k] for k in ("type", "enum", "items", "format")
                                               if k in param})
        if param.get("description") and "description" not in schema:
            schema["description"] = param["description"]
        properties[param["name"]] = schema
        if param.get("required") or param.get("in") == "path":
            required.append(param["name"])
    body = operation.get("requestBody")
    if body:
        if "$ref" in body:
            body = spec.get("components", {}).get("requestBodies", {}).get(body["$ref"].rsplit("/", 1)[-1], {})
        content = body.get("content") or {}
        media = next((m for m in content if m.startswith("application/json")), None)
        if media is None:
            raise Unmappable(f"request body is {', '.join(content) or 'empty'}, not JSON")
        schema = content[media].get("schema") or {}
        resolved = _deref(spec, schema)
        if resolved.get("type", "object") == "object" and "properties" in resolved:
            for name, sub in resolved["properties"].items():
                properties["body_" + name if name in properties else name] = sub
            required += [r for r in resolved.get("required", []) if r in resolved["properties"]]
        else:
            properties["body"] = schema
            if body.get("required"):
                required.append("body")
    return {"type": "object", "properties": properties, "required": required}


def _deref(spec: dict, schema: dict, depth: int = 0) -> dict:
    if depth > 16 or not isinstance(schema, dict) or "$ref" not in schema:
        return schema
    node: Any = spec
    for part in schema["$ref"].lstrip("#/").split("/"):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return _deref(spec, node, depth + 1)


def _response_schema(operation: dict) -> dict | None:
    for status in ("200", "201", "202", "default"):
        response = (operation.get("responses") or {}).get(status)
        if isinstance(response, dict):
            content = response.get("content") or {}
            media = next((m for m in content if m.startswith("application/json")), None)
            if media:
                return content[media].get("schema")
    return None


def from_openapi(source: dict) -> list[dict]:
    spec = source if ("openapi" in source or "swagger" in source) else _read_document(source.get("path") or "")
    if not isinstance(spec, dict) or not isinstance(spec.get("paths"), dict):
        raise SourceError("OpenAPI document has no `paths`")
    _checked(spec, OPENAPI_SPEC, source.get("path") or "OpenAPI document")
    entries = []
    for path, item in spec["paths"].items():
        for method in HTTP_METHODS:
            if isinstance(item.get(method), dict):
                entries.append((path, method, item, item[method]))

    def build(entry: dict) -> dict:
        path, method, item, operation = entry["_operation"]
        name = operation.get("operationId") or f"{method}_{path}"
        description = (" ".join(t for t in (operation.get("summary"), operation.get("description")) if t)
                       or f"{method.upper()} {path}")  # (a tool without a description gives the LLM stages nothing)
        parameters = _operation_parameters(spec, item, operation)
        return openai_tool(name, description, parameters, output=_response_schema(operation), root=spec,
                           http={"method": method.upper(), "path": path})

    wrapped = [{"name": op.get("operationId") or f"{m}_{p}", "_operation": (p, m, i, op)} for p, m, i, op in entries]
    tools, unmapped = _map_tools(wrapped, build)
    info = spec.get("info") or {}
    servers = spec.get("servers") or [{}]
    return [_server(source, "openapi", name=source.get("name") or info.get("title") or "openapi",
                    description=info.get("description", ""), tools=tools, unmapped=unmapped,
                    transport={"kind": "doc_only"}, base_url=servers[0].get("url"))]


# -- live MCP servers --------------------------------------------------------------------------
def mcp_transports(source: dict) -> list[tuple[str, dict]]:
    """(name, transport) for each server a `mcp` source describes."""
    if "mcpServers" in source:
        return [pair for name, entry in source["mcpServers"].items()
                for pair in mcp_transports({"name": name, **entry})]
    if "transport" in source:
        transport = dict(source["transport"])
    elif "command" in source:
        transport = {"kind": "stdio", "command": source["command"], "args": list(source.get("args") or [])}
        for key in ("env", "cwd"):
            if source.get(key):
                transport[key] = source[key]
    elif "url" in source:
        transport = {"kind": "http", "url": source["url"]}
        if source.get("headers"):
            transport["headers"] = source["headers"]
    else:
        raise SourceError("an mcp source needs \"transport\", \"command\" or \"url\"")
    name = source.get("name") or Path(transport.get("command") or transport.get("url") or "mcp").name
    return [(name, transport)]


async def from_mcp(source: dict, *, timeout_s: float = 60.0, errlog: IO[str] | None = None) -> list[dict]:
    from astra_toolgraph.mcp_client import list_server_tools

    records = []
    for name, transport in mcp_transports(source):
        listed = await list_server_tools(transport, timeout_s=timeout_s, errlog=errlog)

        def build(entry: dict) -> dict:
            tool = entry["_tool"]
            return openai_tool(tool.name, tool.description, tool.input_schema, output=tool.output_schema,
                               title=tool.title,
                               annotations=tool.annotations.model_dump(mode="json", exclude_none=True)
                               if tool.annotations else None)

        tools, unmapped = _map_tools([{"name": t.name, "_tool": t} for t in listed], build)
        origin = {"id": slug(name), "domain": source.get("domain")} if "mcpServers" in source else source
        records.append(_server(origin, "mcp", name=name, description=source.get("description", ""), tools=tools,
                               unmapped=unmapped, transport=transport, domain=source.get("domain")))
    return records


def select_tools(server: dict, include: list[str] | None, exclude: list[str] | None) -> dict:
    """Keep only the tools a source exposes (`include_tools`), minus `exclude_tools`."""
    if include is None and not exclude:
        return server
    keep = [t for t in server["tools"] if (include is None or t["function"]["name"] in include)
            and t["function"]["name"] not in (exclude or [])]
    return {**server, "tools": keep}


async def normalize_source(source: dict, *, timeout_s: float = 60.0, errlog: IO[str] | None = None) -> list[dict]:
    """All tool_server records (without provenance) one source describes.

    Any source may name the tools to expose: `"include_tools": [...]` and/or `"exclude_tools": [...]`.
    """
    fmt = detect_format(source)
    if fmt == "mcp":
        servers = await from_mcp(source, timeout_s=timeout_s, errlog=errlog)
    else:
        servers = {"astra": from_astra, "openai": from_openai, "bfcl": from_bfcl, "openapi": from_openapi}[fmt](source)
    return [select_tools(s, source.get("include_tools"), source.get("exclude_tools")) for s in servers]
