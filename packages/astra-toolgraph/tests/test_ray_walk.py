"""`astra-toolgraph walk` (a pure, batched stage) on Ray Data (`astra-core ray`) writes what it writes in one process.

Runs in-process on the session's local Ray (`local_ray`, astra_core.testing): outputs and rejects compared as sets
of records (their provenance times aside), the counts and reasons as printed.
"""

import gzip
import json

import pytest
from astra_core.cli import main as core
from astra_core.testing import records_as_run, summary_of
from astra_toolgraph.cli import main as toolgraph
from click.testing import CliRunner

STEP = {"command": "astra-toolgraph graph", "version": "0.1.0", "model": None, "seed": None,
        "time": "2026-11-22T03:00:00+00:00"}


def graph(index: int) -> dict:
    nodes = [f"tool{j}" for j in range(2 + index % 4)]
    edges = [{"src": a, "dst": b, "weight": 1.0 + j} for j, (a, b) in enumerate(zip(nodes, nodes[1:], strict=False))]
    return {"id": f"graph-{index}", "server_id": f"server-{index}", "nodes": nodes, "edges": edges,
            "meta": {"provenance": [STEP]}}


def bad_input() -> list[str]:
    """Good graphs, and bad input of every shape a stage sees: a line that is no JSON, a wrong-typed field, a
    blank line, a duplicate id, an edge naming no node (the stage's own Malformed), a graph without walks
    (Rejected by the stage)."""
    lines = [json.dumps(graph(i)) for i in range(23)]
    lines[4] = '{"id": "graph-4", "server_id": 7, "nodes": ["a"], "edges": [], "meta": {}}'
    lines[7] = "{not json"
    lines[9] = ""
    lines[11] = json.dumps({**graph(11), "edges": [{"src": "tool0", "dst": "ghost", "weight": 1.0}]})
    lines[15] = json.dumps({**graph(15), "nodes": ["alone"], "edges": []})
    lines.append(json.dumps(graph(3)))
    return lines


def run_here(*args) -> str:
    result = CliRunner().invoke(toolgraph, ["walk", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stderr


def run_on_ray(*args, ray_args=("--batch-size", "4", "--actors", "2")) -> str:
    result = CliRunner().invoke(core, ["ray", *ray_args, "astra-toolgraph", "walk", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stderr


def test_walk_on_ray_writes_the_records_rejects_and_counts_of_one_process(tmp_path, local_ray):
    graphs = tmp_path / "graphs.jsonl"
    graphs.write_text("\n".join(bad_input()) + "\n")
    flags = ["--walks", "6", "--skip-bad"]
    here = run_here(graphs, *flags, "-o", tmp_path / "here.jsonl", "--rejects", tmp_path / "here.rejects.jsonl")
    there = run_on_ray(graphs, *flags, "-o", tmp_path / "ray.jsonl", "--rejects", tmp_path / "ray.rejects.jsonl")
    assert records_as_run(tmp_path / "ray.jsonl") == records_as_run(tmp_path / "here.jsonl")
    assert records_as_run(tmp_path / "ray.rejects.jsonl") == records_as_run(tmp_path / "here.rejects.jsonl")
    assert summary_of(there, "astra-toolgraph walk") == summary_of(here, "astra-toolgraph walk")
    assert "rejected 5" in there and "malformed ×4" in there  # (each bad shape: not a silent pass)
    assert "ray: 2 actors" in there


def test_a_bad_line_without_skip_bad_stops_the_run_before_any_record_naming_it_as_one_process_does(tmp_path, local_ray):
    graphs = tmp_path / "graphs.jsonl"
    graphs.write_text("\n".join(bad_input()) + "\n")
    here = CliRunner().invoke(toolgraph, ["walk", str(graphs), "-o", str(tmp_path / "here.jsonl")])
    there = CliRunner().invoke(core, ["ray", "astra-toolgraph", "walk", str(graphs), "-o", str(tmp_path / "ray.jsonl")])
    assert here.exit_code == there.exit_code == 1
    [error] = [line for line in here.stderr.splitlines() if line.startswith("astra-toolgraph walk: ")]
    assert f"{graphs}:5: " in error and "field server_id" in error
    assert error in there.stderr.splitlines(), there.output
    assert not (tmp_path / "ray.jsonl").exists()  # (on Ray no record is processed: every line is checked first)


def test_walk_on_ray_reads_a_directory_of_jsonl_gzip_and_parquet_and_resumes(tmp_path, local_ray):
    import pyarrow
    import pyarrow.parquet as pq

    records = [graph(i) for i in range(12)]
    directory = tmp_path / "graphs"
    directory.mkdir()
    (directory / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:4]))
    with gzip.open(directory / "b.jsonl.gz", "wt") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records[4:8])
    pq.write_table(pyarrow.Table.from_pylist(records[8:]), directory / "c.parquet")
    (directory / "_SUCCESS").write_text("")  # a marker a job writes: not input
    everything = tmp_path / "all.jsonl"
    everything.write_text("".join(json.dumps(r) + "\n" for r in records))
    run_here(everything, "--walks", "5", "-o", tmp_path / "here.jsonl")

    half = tmp_path / "half.jsonl"  # a run cut short: the first graphs' walks written
    half.write_text("".join(json.dumps(r) + "\n" for r in records[:5]))
    out = tmp_path / "ray.jsonl"
    run_here(half, "--walks", "5", "-o", out)
    there = run_on_ray(directory, "--walks", "5", "-o", out, "--resume")
    assert "read 12 · skipped 5 done (resume)" in there
    assert records_as_run(out) == records_as_run(tmp_path / "here.jsonl")


def test_what_cannot_run_on_ray_is_said_in_one_line(tmp_path):
    graphs = tmp_path / "graphs.jsonl"
    graphs.write_text(json.dumps(graph(1)) + "\n")
    stats = CliRunner().invoke(core, ["ray", "astra-toolgraph", "stats", str(graphs)])
    assert stats.exit_code == 2 and "astra-toolgraph stats is not a stage command" in stats.output
    assert "walk" in stats.output  # (the stages it could run are named)
    verl = CliRunner().invoke(core, ["ray", "astra-core", "to-verl", str(graphs)])
    assert verl.exit_code == 2 and "numbers its records in input order: run it in one process" in verl.output
    stdin = CliRunner().invoke(core, ["ray", "astra-toolgraph", "walk", "-"], input=graphs.read_text())
    assert stdin.exit_code == 1 and "not stdin" in stdin.stderr
    unknown = CliRunner().invoke(core, ["ray", "astra-nothing", "walk"])
    assert unknown.exit_code == 2 and "astra-nothing is not an astra command" in unknown.output


@pytest.mark.slow
def test_walk_on_a_cluster_of_two_nodes_writes_what_one_process_writes(tmp_path, ray_cluster):
    graphs = tmp_path / "graphs.jsonl"
    graphs.write_text("\n".join(bad_input()) + "\n")
    flags = ["--walks", "6", "--skip-bad"]
    here = run_here(graphs, *flags, "-o", tmp_path / "here.jsonl", "--rejects", tmp_path / "here.rejects.jsonl")
    there = ray_cluster.run("--batch-size", "4", "astra-toolgraph", "walk", graphs, *flags,
                            "-o", tmp_path / "ray.jsonl", "--rejects", tmp_path / "ray.rejects.jsonl")
    assert there.returncode == 0, there.stderr
    assert records_as_run(tmp_path / "ray.jsonl") == records_as_run(tmp_path / "here.jsonl")
    assert records_as_run(tmp_path / "ray.rejects.jsonl") == records_as_run(tmp_path / "here.rejects.jsonl")
    assert summary_of(there.stderr, "astra-toolgraph walk") == summary_of(here, "astra-toolgraph walk")
    assert batches_by_node(there.stderr) == 2  # both nodes ran batches


def batches_by_node(stderr: str) -> int:
    """How many nodes ran batches, from the summary's `ray:` line."""
    [line] = [line for line in stderr.splitlines() if line.startswith("  ray: ")]
    return len([part for part in line.split("batches by node: ")[1].split(", ") if int(part.split()[1]) > 0])
