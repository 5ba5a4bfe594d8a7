from astra_toolgraph.graph import GraphConfig, build_graph, pair_counts, schema_dependencies
from astra_toolgraph.schema_map import openai_tool
from toolgraph_helpers import invoke, read_jsonl, write_jsonl


def _tool(name, description, params=None, required=(), output=None):
    return openai_tool(name, description, {"type": "object", "properties": params or {}, "required": list(required)},
                       output=output)


SQLITE_LIKE = {"id": "db", "name": "db", "transport": {"kind": "doc_only"}, "meta": {"provenance": []}, "tools": [
    _tool("list_tables", "List all tables in the database."),
    _tool("describe_table", "Show the schema of a table.", {"table_name": {"type": "string"}}, ["table_name"]),
    _tool("read_query", "Run a SELECT query.", {"query": {"type": "string"}}, ["query"]),
]}


def test_edges_are_weighted_by_consecutive_pair_counts():
    chains = [["list_tables", "describe_table", "read_query"], ["list_tables", "describe_table"],
              ["read_query", "read_query", "unknown_tool"]]
    assert pair_counts(chains, {"list_tables", "describe_table", "read_query"}) == {
        ("list_tables", "describe_table"): 2, ("describe_table", "read_query"): 1}
    graph = build_graph(SQLITE_LIKE, chains, GraphConfig(schema_edges=False))
    assert [(e["src"], e["dst"], e["weight"], e["origin"]) for e in graph["edges"]] == [
        ("list_tables", "describe_table", 2.0, ["llm"]), ("describe_table", "read_query", 1.0, ["llm"])]
    assert graph["id"] == "graph-db" and graph["meta"]["parent_id"] == "db"


def test_schema_edges_exist_without_any_chain():
    """No output schema: list_tables hands back tables, which feed describe_table's table_name."""
    graph = build_graph(SQLITE_LIKE, [], GraphConfig())
    (edge,) = graph["edges"]
    assert (edge["src"], edge["dst"], edge["origin"], edge["weight"]) == ("list_tables", "describe_table", ["schema"], 1.0)
    assert edge["evidence"][0]["param"] == "table_name"


def test_output_schemas_drive_schema_edges_by_name_and_type():
    create = _tool("create_order", "Create an order.", {"sku": {"type": "string"}}, ["sku"],
                   output={"type": "object", "properties": {"order_id": {"type": "string"}}})
    status = _tool("order_status", "Status of an order.", {"order_id": {"type": "string"}}, ["order_id"])
    count = _tool("count_orders", "Count orders of a day.", {"order_id": {"type": "integer"}}, ["order_id"])
    listing = _tool("list_users", "All users.", output={"type": "object", "properties": {"users": {
        "type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}}}}})
    profile = _tool("user_profile", "A user's profile.", {"user_id": {"type": "string"}}, ["user_id"])
    edges = schema_dependencies([create, status, count, listing, profile])
    assert ("create_order", "order_status") in edges
    assert ("create_order", "count_orders") not in edges  # a string id cannot feed an integer parameter
    assert edges[("list_users", "user_profile")][0]["field"] == "users[].id"  # "id" of a users list feeds user_id
    assert ("order_status", "create_order") not in edges


def test_graph_command_combines_chains_and_schema_edges(tmp_path):
    servers = write_jsonl(tmp_path / "servers.jsonl", [SQLITE_LIKE, {**SQLITE_LIKE, "id": "lonely", "tools": [
        _tool("ping", "Check the service answers."), _tool("echo", "Repeat the given text.", {"t": {"type": "string"}},
                                                          ["t"])]}])
    chain = {"id": "c1", "server_id": "db", "tools": ["list_tables", "describe_table"], "meta": {}}
    chains = write_jsonl(tmp_path / "chains.jsonl", [chain, chain])
    rejects = tmp_path / "rejects.jsonl"
    out = tmp_path / "graphs.jsonl"
    invoke("graph", servers, "--chains", chains, "-o", out, "--rejects", rejects)
    (graph,) = read_jsonl(out)
    (edge,) = graph["edges"]
    assert edge["weight"] == 3.0 and edge["origin"] == ["llm", "schema"] and edge["pair_count"] == 2
    assert read_jsonl(rejects)[0]["reason"].startswith("no edges")
