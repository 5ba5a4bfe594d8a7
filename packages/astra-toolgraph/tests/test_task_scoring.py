"""Task scoring is astra-reward's judge (paper Eq. 1) on our task records. Replies are recorded
(a real loopback HTTP server)."""

import json

from astra_reward.cli import main as reward
from click.testing import CliRunner
from toolgraph_helpers import read_jsonl, write_jsonl


def verdict(score):
    return json.dumps({name: {"reason": "recorded", "score": score}
                       for name in ("question_quality", "scenario_realism", "tool_necessity")})


def test_judge_task_keeps_tasks_above_the_thresholds(sample_servers, recorded_llm, tmp_path):
    servers = write_jsonl(tmp_path / "servers.jsonl", sample_servers)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [
        {"id": "task-good", "server_id": "order-desk", "question": "Order two USB-C cables for ana@example.com.",
         "chain": ["search_products", "create_order"], "origin": "chain", "language": "en", "meta": {}},
        {"id": "task-bad", "server_id": "order-desk", "question": "Hello?", "chain": None, "origin": "server",
         "language": "en", "meta": {}}])
    llm = recorded_llm(replies=[lambda body: verdict(5) if "USB-C" in json.dumps(body) else verdict(1)])
    rejects = tmp_path / "rejects.jsonl"
    result = CliRunner().invoke(reward, ["judge-task", str(tasks), "--servers", str(servers), "--min-score", "0.6",
                                         "--base-url", llm.base_url, "--model", "recorded", "--rejects", str(rejects)])
    assert result.exit_code == 0, result.stderr
    (kept,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert kept["id"] == "task-good" and kept["scores"]["question_quality"] == 1.0
    assert [r["id"] for r in read_jsonl(rejects)] == ["task-bad"]
    assert "search_products" in json.dumps(llm.chat_requests)  # the judge saw the server's tools
