"""The token-usage line of a stage command: shown for a stage that asked the endpoint, absent for one that
asked nothing (a stage whose records needed no LLM call printed `llm: 0 requests ...`)."""

import json

import click
from astra_core.command import stage_command
from click.testing import CliRunner


@click.group()
def main():
    pass


@stage_command(main, "ask", llm=True)
async def ask(record, llm):
    if record.get("question"):
        record["answer"] = (await llm.chat([{"role": "user", "content": record["question"]}])).content
    return record


def run(server, tmp_path, records):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(main, ["ask", str(source), "--base-url", server.base_url, "--max-retries", "0"])
    assert result.exit_code == 0, result.output
    return result.stderr


def test_usage_line_only_for_a_stage_that_made_requests(recorded_llm, tmp_path):
    server = recorded_llm(replies=["42"])
    assert "llm: 1 requests" in run(server, tmp_path, [{"id": "a", "meta": {}, "question": "6 x 7?"}])
    assert "llm:" not in run(server, tmp_path, [{"id": "b", "meta": {}}])
