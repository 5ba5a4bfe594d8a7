"""LLM stages against an endpoint that answers every request after a fixed latency: achieved time vs the bound.

A local OpenAI-compatible server (its own process, 127.0.0.1, no model) answers each request after
exactly L seconds with a reply valid for what was asked (the smallest instance of the request's
`response_format` JSON schema, or a short text). A stage over N records that sends R requests in all
with C in flight can at best take R * L / C seconds; the stage runs as its real command (a subprocess,
JSONL in and out) and the script prints its time against that bound, and the client's CPU per record (and per
request, for stages that ask more than one question per record).
The transport floor is measured in the same run: N requests of the same shape sent with aiohttp alone (the HTTP
client astra-core's LLMClient uses), at the same C and L, no stage code at all. A stage that asks R questions per
record cannot spend less client CPU per record than R times that floor.
Each stage first runs once over a few records (not measured), so its modules' bytecode is cached as it
is on a user's machine after the first run (even where PYTHONDONTWRITEBYTECODE is set).

    .venv/bin/python benchmarks/synthesis_throughput.py | tee benchmarks/results/synthesis_throughput.txt
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# -- the fixed-latency endpoint -------------------------------------------------------------------------


def minimal_instance(schema: dict, defs: dict | None = None):
    """The smallest value valid against a JSON schema (the subset our stages ask for)."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return minimal_instance(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return minimal_instance(schema[key][0], defs)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: minimal_instance(properties.get(name, {}), defs) for name in schema.get("required", [])}
    if kind == "array":
        return [minimal_instance(schema.get("items", {}), defs) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        return "x" * max(1, schema.get("minLength", 1))
    if kind in ("number", "integer"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return True
    return None


# A free-text reply that text stages accept (a request of more than a few words), so records are written.
TEXT_REPLY = "1. Please list every open order of the customer with id 42 and show the total of each one."


def reply_for(body: dict) -> dict:
    response_format = body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema")
    content = json.dumps(minimal_instance(schema)) if schema else TEXT_REPLY
    return {"id": "x", "object": "chat.completion", "model": "fixed-latency",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def serve(port_queue, latency: float, counter) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                length = next((int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length")), 0)
                body = json.loads(await reader.readexactly(length)) if length else {}
                if method == "GET":
                    payload = {"object": "list", "data": [{"id": "fixed-latency"}]}
                else:
                    with counter.get_lock():
                        counter.value += 1
                    await asyncio.sleep(latency)
                    payload = reply_for(body)
                data = json.dumps(payload).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(data)).encode() + b"\r\n\r\n" + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
        port_queue.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_endpoint(latency: float):
    """The endpoint in a process of its own: (the process, its base URL, its count of chat requests)."""
    context = multiprocessing.get_context("spawn")
    ports, counter = context.Queue(), context.Value("l", 0)
    server = context.Process(target=serve, args=(ports, latency, counter), daemon=True)
    server.start()
    return server, f"http://127.0.0.1:{ports.get(timeout=30)}/v1", counter


# -- the stages -----------------------------------------------------------------------------------------

def inputs(stage: str, count: int, folder: Path) -> Path:
    """N input records of a stage, made from the packages' bundled samples with fresh ids."""
    from astra_core.formats_doc import example

    if stage == "astra-reward judge-trajectory":
        base = example("trajectory")
    elif stage == "astra-toolgraph tasks":
        base = example("tool_server")
    else:
        base = {"question": "What is the population of the capital of Valdoria?", "domain": "geography"}
    path = folder / f"{stage.split()[-1]}.jsonl"
    with path.open("w") as handle:
        for index in range(count):
            record = dict(base)
            record["id"] = f"bench-{index}"
            handle.write(json.dumps(record) + "\n")
    return path


STAGE_ARGS = {
    "astra-reward judge-trajectory": [],
    "astra-toolgraph tasks": ["--per-server", "1"],
    "astra-qaenv synthesize": ["--attempts", "1"],
}


def run_stage(stage: str, records: Path, base_url: str, concurrency: int) -> tuple[float, float, int, int]:
    """(seconds, client CPU seconds, records written, rejected)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    bin_dir = Path(sys.executable).parent
    tool, command = stage.split()
    argv = [str(bin_dir / tool), command, str(records), "--concurrency", str(concurrency), "--max-retries", "0",
            "--base-url", base_url, "--model", "fixed-latency", *STAGE_ARGS[stage]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"})
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in (0, 3):
        raise SystemExit(f"{stage} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    written = len(result.stdout.splitlines())
    # the stage's closing count line (progress lines start the same way)
    summary = next((line for line in reversed(result.stderr.splitlines())
                    if line.startswith(stage + ":") and "rejected " in line), "")
    rejected = int(summary.split("rejected ")[1].split()[0].replace(",", "")) if summary else 0
    return seconds, cpu, written, rejected


# aiohttp alone, in a process of its own: CPU per request of the request phase (start-up not counted)
FLOOR_CLIENT = """
import asyncio, json, resource, sys
import aiohttp

url, count, concurrency = sys.argv[1] + "/chat/completions", int(sys.argv[2]), int(sys.argv[3])
body = {"model": "fixed-latency", "messages": [{"role": "system", "content": "Score the trajectory."},
                                               {"role": "user", "content": "x" * 2000}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "judgment", "schema": {
            "type": "object", "properties": {"score": {"type": "number"}, "reason": {"type": "string"}},
            "required": ["score", "reason"]}}}}

async def main():
    limit = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one():
            async with limit, session.post(url, json=body) as reply:
                json.loads(await reply.read())
        await asyncio.gather(*[one() for _ in range(min(count, concurrency))])  # connections opened
        before = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.gather(*[one() for _ in range(count)])
        after = resource.getrusage(resource.RUSAGE_SELF)
        print(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

asyncio.run(main())
"""


def transport_floor(base_url: str, requests: int, concurrency: int) -> float:
    """Client CPU seconds per request of aiohttp alone."""
    done = subprocess.run([sys.executable, "-c", FLOOR_CLIENT, base_url, str(requests), str(concurrency)],
                          capture_output=True, text=True, check=True)
    return float(done.stdout) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4096)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--stages", default=",".join(STAGE_ARGS))
    args = parser.parse_args()

    server, base_url, counter = start_endpoint(args.latency)
    print(f"N = {args.records} records, C = {args.concurrency} in flight, L = {args.latency:.2f} s per request; "
          f"{os.cpu_count()} cores")
    try:
        floor = transport_floor(base_url, args.records, args.concurrency)
        print(f"transport floor (aiohttp alone, same C and L): client CPU {1000 * floor:4.2f} ms per request")
        with tempfile.TemporaryDirectory() as tmp:
            for stage in args.stages.split(","):
                run_stage(stage, inputs(stage, 8, Path(tmp)), base_url, args.concurrency)  # the warm-up
                records = inputs(stage, args.records, Path(tmp))
                with counter.get_lock():
                    counter.value = 0
                seconds, cpu, written, rejected = run_stage(stage, records, base_url, args.concurrency)
                requests = counter.value
                bound = requests * args.latency / args.concurrency
                print(f"{stage:<32} {requests:6d} requests in {seconds:6.1f} s, bound {bound:6.1f} s: "
                      f"{100 * bound / seconds:5.1f}% of the bound; client CPU {1000 * cpu / args.records:5.2f} ms "
                      f"per record ({1000 * cpu / requests:4.2f} ms per request); {written} written, {rejected} rejected; "
                      f"{'MET' if bound / seconds >= 0.9 and cpu / args.records <= 0.001 else 'NOT MET'}")
                per_record = requests / args.records
                if per_record > 1:
                    print(f"{'':<32} {per_record:g} requests per record: the transport alone costs "
                          f"{1000 * per_record * floor:4.2f} ms per record")
        print(f"load average {os.getloadavg()[0]:.1f} at the end; targets (issue 20): >= 90% of the bound, client "
              f"CPU <= 1 ms per record")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
