"""The embedded server's prefix cache: multi-turn conversations over HTTP, with and without it.

`astra-core serve` (SmolLM2-135M-Instruct on CPU) is started twice, with `--prefix-cache-tokens 0`
(the baseline: every request reads its whole prompt) and with the default cache. The same
conversations are played against each, one request at a time as an agent loop does: a system prompt
with an astra-qaenv RL sample's tool schemas, the user's question, then per turn the assistant's reply
(greedy, `--max-tokens`) and a user follow-up. Prints seconds per turn, the ratio, and whether every
reply is identical (it must be: greedy, and the cache holds exactly the prompt's keys and values).

    PATH=.venv/bin:$PATH .venv/bin/python benchmarks/server_prefix_cache.py | tee benchmarks/results/server_prefix_cache.txt
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from rollout_prefill import rl_samples  # noqa: E402 - the same prompts as the rollout benchmarks


def start_server(prefix_cache_tokens: int, threads: int) -> tuple[subprocess.Popen, str]:
    folder = tempfile.TemporaryDirectory(prefix="astra-bench-")
    port_file = Path(folder.name) / "port"
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "astra-core"), "serve", "--port", "0", "--port-file", str(port_file),
         "--threads", str(threads), "--prefix-cache-tokens", str(prefix_cache_tokens)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        if port_file.exists() and (port := port_file.read_text().strip()):
            folder.cleanup()
            return server, f"http://127.0.0.1:{port}/v1"
        if server.poll() is not None:
            raise SystemExit("astra-core serve exited before it was ready")
        time.sleep(0.2)
    raise SystemExit("astra-core serve did not come up in 120 s")


def play(base_url: str, samples: list[dict], turns: int, max_tokens: int) -> tuple[float, list[str], int]:
    """(seconds, every reply, prompt tokens sent) of one conversation per sample, requests one at a time."""
    replies, prompt_tokens = [], 0
    started = time.perf_counter()
    with httpx.Client(base_url=base_url, timeout=600) as client:
        for sample in samples:
            messages = list(sample["messages"])  # its system prompt and the user's question
            for turn in range(turns):
                body = {"model": "local", "messages": messages, "tools": sample["tools"], "max_tokens": max_tokens,
                        "temperature": 0}
                response = client.post("/chat/completions", json=body).raise_for_status().json()
                reply = response["choices"][0]["message"].get("content") or ""
                prompt_tokens += response["usage"]["prompt_tokens"]
                replies.append(reply)
                messages += [{"role": "assistant", "content": reply},
                             {"role": "user", "content": f"Thanks. Follow-up {turn + 1}: please say a little more."}]
    return time.perf_counter() - started, replies, prompt_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    samples = rl_samples(args.conversations)
    results = {}
    for name, tokens in (("no cache (baseline)", 0), ("prefix cache", 16384)):
        server, url = start_server(tokens, args.threads)
        try:
            play(url, samples[:1], 1, 4)  # warm-up: first-call allocations, not counted
            results[name] = play(url, samples, args.turns, args.max_tokens)
        finally:
            server.terminate()
            server.wait()
    requests = args.conversations * args.turns
    print(f"{args.conversations} conversations x {args.turns} turns, one request at a time, greedy, "
          f"max_tokens {args.max_tokens}, SmolLM2-135M-Instruct on {args.threads} CPU threads")
    for name, (seconds, _, prompt_tokens) in results.items():
        print(f"{name:<20} {seconds:7.1f} s  {seconds / requests:5.2f} s/request  "
              f"({prompt_tokens / requests:.0f} prompt tokens per request)")
    (base, base_replies, _), (cached, cached_replies, _) = results.values()
    print(f"speed-up {base / cached:.2f}x; replies identical: {base_replies == cached_replies}")


if __name__ == "__main__":
    main()
