import json

from astra_toolgraph.stats import collect, table
from matplotlib.image import imread
from toolgraph_helpers import invoke, write_jsonl


def trajectory(tid, calls, failures=0):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    for i in range(calls):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": f"tool_{i % 2}", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "Error: timeout" if i < failures else "ok"})
    messages.append({"role": "assistant", "content": "done"})
    return {"id": tid, "messages": messages, "tools": [], "meta": {}}


def test_summary_counts_messages_calls_roles_and_tools():
    stats = collect([trajectory("a", 0), trajectory("b", 3, failures=1), trajectory("c", 7)])
    summary = stats.summary()
    assert summary["samples"] == 3 and stats.messages_per_sample == [3, 9, 17]
    assert summary["tool_calls"] == 10 and summary["tool_calls_per_sample_mean"] == 3.33
    assert summary["samples_with_tool_calls"] == 2 and summary["samples_with_1_to_5_calls"] == 1
    assert summary["role_shares"] == {"system": round(3 / 29, 4), "user": round(3 / 29, 4),
                                      "assistant": round(13 / 29, 4), "tool": round(10 / 29, 4)}
    assert summary["unique_tools"] == 2 and summary["failed_tool_calls"] == 1
    text = table(stats)
    assert "messages per sample (mean / median / max)  9.67 / 9 / 17" in text
    assert "samples                                    0" in table(collect([]))


def test_stats_command_prints_a_table_and_writes_pngs(tmp_path):
    data = write_jsonl(tmp_path / "trajectories.jsonl", [trajectory("a", 1), trajectory("b", 2)])
    result = invoke("stats", data, "--plots", tmp_path / "plots")
    assert "samples" in result.stdout and "unique tools called" in result.stdout
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert names == ["messages_per_sample.png", "role_shares.png", "tool_calls_per_sample.png", "unique_tools.png"]
    for name in names:
        image = imread(tmp_path / "plots" / name)
        assert image.shape[0] > 100 and image.shape[1] > 100
    as_json = json.loads(invoke("stats", data, "--json").stdout)
    assert as_json["samples"] == 2 and as_json["tool_calls"] == 3
