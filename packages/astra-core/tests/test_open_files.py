"""The LLM client under an open-file limit (`ulimit -n`), in a process of its own with the limits a machine sets,
against a real loopback endpoint (recorded replies, answered slowly so every connection is open at once)."""

import resource
import subprocess
import sys
import time

import pytest

CLIENT = """
import asyncio, json, os, sys
from astra_core.llm import LLMClient, LLMConfig, LLMError

base_url, concurrency, fill = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "fill"

async def main():
    async with LLMClient(LLMConfig(base_url=base_url, model="recorded", concurrency=concurrency,
                                   max_retries=0)) as llm:
        if fill:  # every descriptor taken by something else (after the client made its room)
            await llm.check()
            while True:
                try:
                    os.open("/dev/null", os.O_RDONLY)
                except OSError:
                    break
        try:
            replies = await asyncio.gather(*[llm.chat([{"role": "user", "content": str(i)}])
                                             for i in range(concurrency)])
        except LLMError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
            return
        print(json.dumps({"answered": sum(reply.content == "ok" for reply in replies)}))

asyncio.run(main())
"""


def run_client(base_url: str, concurrency: int, soft: int, hard: int, fill: bool = False) -> dict:
    import json

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run([sys.executable, "-c", CLIENT, base_url, str(concurrency), "fill" if fill else "-"],
                          capture_output=True, text=True, preexec_fn=limit, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def slow_ok(body: dict) -> str:
    time.sleep(0.5)
    return "ok"


@pytest.fixture
def hard_limit() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.fail(f"this machine's hard open-file limit is {hard}: the test needs 1024")
    return hard


def test_a_low_soft_limit_is_raised_to_hold_every_connection(recorded_llm, hard_limit):
    """Soft limit 128 (1,024 is a common default) and 300 requests in flight: every one answered. Before, the
    connections past the limit failed with EMFILE, reported as an endpoint that does not answer."""
    server = recorded_llm(replies=[slow_ok])
    result = run_client(server.base_url, 300, soft=128, hard=hard_limit)
    assert result == {"answered": 300}
    assert server.max_in_flight > 128  # the connections were open at once, past the old limit


def test_a_hard_limit_below_the_concurrency_says_so_before_any_request(recorded_llm):
    server = recorded_llm(replies=["ok"])
    result = run_client(server.base_url, 300, soft=128, hard=128)
    assert result["error"] == "LLMUnavailable"
    assert result["message"] == ("concurrency 300 needs up to 364 open files (a connection per request in flight), "
                                 "and this process may open at most 128 (ulimit -Hn): lower the concurrency to 64 "
                                 "or less, or raise the hard limit")
    assert server.chat_requests == []


def test_descriptors_used_up_elsewhere_are_named_not_blamed_on_the_endpoint(recorded_llm):
    server = recorded_llm(replies=["ok"])
    result = run_client(server.base_url, 8, soft=200, hard=200, fill=True)
    assert result["error"] == "LLMUnavailable"
    assert "this process has no file descriptor left for a connection (ulimit -n: 200;" in result["message"]
    assert "does not answer" not in result["message"]
