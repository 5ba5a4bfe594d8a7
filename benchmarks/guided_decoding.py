"""Schema-guided replies of the embedded model: the writer that reads what it wrote once, against re-reading it.

The embedded server writes a reply to a `response_format` JSON schema or a required tool call piece by piece
(astra_core.local.guided). Baseline (the writer before 97abca3): every piece re-read all the text written so far
from the prompt's KV cache, and every option of a choice was scored in its own forward with its own copy of
that cache. Now: a piece continues the cache of the prompt and of the text before it, and a choice's options
are scored in one batched forward.

The requests are real: the script serves the embedded SmolLM2 in a subprocess that records every guided request,
runs the toolkit's own LLM stages against it on their bundled sample data (toolgraph synthesize-chains,
reward judge-task, evolve plans / verify-tasks / rollout), then replays each recorded request through both
writers in this process (each with a fresh prompt cache, so both read the prompt once) and prints the time of
each and whether the replies are identical (greedy, and seeded sampling).

    .venv/bin/python benchmarks/guided_decoding.py | tee benchmarks/results/guided_decoding.txt
"""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def record_server(port_file: str, calls_file: str) -> None:
    """The embedded server, recording every guided request (arguments and reply) to `calls_file`."""
    import astra_core.local.guided as guided
    from astra_core.local.server import serve

    calls = []

    def recorder(name: str, original):
        def recording(model, tokenizer, *args, **kwargs):
            reply = original(model, tokenizer, *args, **kwargs)
            calls.append((name, args, {k: v for k, v in kwargs.items() if k != "prefix_cache"}, reply))
            Path(calls_file).write_bytes(pickle.dumps(calls))
            return reply
        return recording

    for name in ("guided_json", "guided_tool_call"):
        setattr(guided, name, recorder(name, getattr(guided, name)))
    serve(None, port=0, port_file=port_file)


def run(*command: str, stdin: str | None = None) -> str:
    done = subprocess.run([str(BIN / command[0]), *command[1:]], input=stdin, capture_output=True, text=True,
                          check=True)
    return done.stdout


def record_requests(work: Path) -> list:
    """Run the LLM stages against the recording server; the guided requests they sent."""
    port_file, calls_file = work / "port", work / "calls.pkl"
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file), str(calls_file)],
                              stderr=subprocess.DEVNULL)
    try:
        while not port_file.exists() or not port_file.read_text():
            if server.poll() is not None:
                raise SystemExit("the embedded server did not start")
            time.sleep(0.2)
        os.environ["ASTRA_LLM_BASE_URL"] = f"http://127.0.0.1:{port_file.read_text()}/v1"
        servers = run("astra-toolgraph", "normalize", stdin=run("astra-toolgraph", "samples"))
        order_desk = "".join(line + "\n" for line in servers.splitlines() if '"id":"order-desk"' in line)
        run("astra-toolgraph", "synthesize-chains", "--temperature", "0", "--max-tokens", "64", stdin=order_desk)
        reward_data = Path(run("astra-reward", "sample-data").strip())
        tasks = (reward_data / "tasks.jsonl").read_text().splitlines()[0] + "\n"
        run("astra-reward", "judge-task", "--servers", str(reward_data / "servers.jsonl"), "--attempts", "1",
            "--temperature", "0", "--max-tokens", "48", stdin=tasks)
        domain, plan, seed_tasks = (work / "domain.jsonl", work / "plan.jsonl", work / "tasks.jsonl")
        domain.write_text(run("astra-toolgraph", "evolve", "sample-domain"))
        plan.write_text(run("astra-toolgraph", "evolve", "sample-domain", "--what", "plan"))
        seed_tasks.write_text(run("astra-toolgraph", "evolve", "sample-domain", "--what", "tasks"))
        run("astra-toolgraph", "evolve", "plans", "--seed", "0", str(domain), "--plans", "1", "--agent-max-tokens", "96")
        verified = run("astra-toolgraph", "evolve", "verify-tasks", "--seed", "0", str(seed_tasks), "--plans", str(plan),
                       "--domains", str(domain), "--verify-calls", "1", "--agent-max-tokens", "64")
        run("astra-toolgraph", "evolve", "rollout", "--domains", str(domain), "--tool-choice", "first-required",
            "--user-opening", "question", "--temperature", "0", "--max-turns", "1", "--max-user-turns", "1",
            "--assistant-max-tokens", "48", "--user-max-tokens", "24", stdin=verified)
        return pickle.loads(calls_file.read_bytes())
    finally:
        server.terminate()
        server.wait()


def rereading_writer():
    """The baseline writer: re-reads the written text from the prompt's cache for every piece, one forward
    (and one cache copy) per option of a choice."""
    import torch
    from astra_core.local.guided import _Writer
    from astra_core.local.kv_cache import cache_argument, returned_cache

    class RereadingWriter(_Writer):
        def _read(self, ids):
            cache = copy.deepcopy(self.prompt_cache)
            if len(ids) == len(self.prompt_ids):
                return cache, self.prompt_next_logits
            with torch.inference_mode():
                out = self.model(torch.tensor([ids[len(self.prompt_ids):]]), **cache_argument(self.model, cache),
                                 use_cache=True, logits_to_keep=1)
            return returned_cache(out), out.logits[0, -1].float()

        def scores(self, options):
            written, scores = self._written_ids(), []
            for option in options:
                tokens = self.tokenizer.encode(option, add_special_tokens=False)
                with torch.inference_mode():
                    logits = self.model(torch.tensor([written + tokens]), use_cache=True,
                                        **cache_argument(self.model, copy.deepcopy(self.prompt_cache))).logits[0].float()
                predicted = torch.log_softmax(torch.cat([self.prompt_next_logits[None], logits[:-1]]), dim=-1)
                positions = torch.arange(len(written), len(written) + len(tokens))
                scores.append(float(predicted[positions, torch.tensor(tokens)].sum()) / len(tokens))
            return scores

    return RereadingWriter


def replay(calls: list, writer_class) -> tuple[float, list[str]]:
    import astra_core.local.guided as guided
    import torch
    from astra_core.local.model import load_model
    from astra_core.local.prefix_cache import PrefixCache

    model, tokenizer = load_model()
    current, guided._Writer = guided._Writer, writer_class
    try:
        elapsed, replies = 0.0, []
        for name, args, kwargs, _ in calls:
            torch.manual_seed(0)
            started = time.perf_counter()
            replies.append(getattr(guided, name)(model, tokenizer, *args, **kwargs, prefix_cache=PrefixCache(model)))
            elapsed += time.perf_counter() - started
        return elapsed, replies
    finally:
        guided._Writer = current


def main() -> None:
    import astra_core.local.guided as guided

    with tempfile.TemporaryDirectory() as work:
        print("recording the guided requests of toolgraph synthesize-chains, reward judge-task and evolve plans /"
              " verify-tasks / rollout on their sample data ...", file=sys.stderr)
        calls = record_requests(Path(work))
    kinds = sorted({f"{name} (temperature {kwargs['temperature']:g})" for name, _, kwargs, _ in calls})
    print(f"{len(calls)} guided requests recorded: {', '.join(kinds)}")
    replay(calls[:1], guided._Writer)  # warm-up: model load, first-call allocations
    baseline_time, baseline = replay(calls, rereading_writer())
    reading_time, replies = replay(calls, guided._Writer)
    same = sum(a == b for a, b in zip(baseline, replies, strict=True))
    print(f"baseline (re-reads the written text per piece, one forward per option): {baseline_time:6.1f} s")
    print(f"reads what it wrote once, options in one batch:                          {reading_time:6.1f} s")
    print(f"speed-up {baseline_time / reading_time:.2f}x; identical replies: {same} of {len(calls)}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        record_server(sys.argv[2], sys.argv[3])
    else:
        main()
