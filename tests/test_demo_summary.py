"""scripts/demo_summary.py on a small out/demo tree: counts per step from the files, the three headline
numbers, and steps that did not run (or wrote a cut-off line) reported as such instead of failing."""

import json
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "demo_summary.py"


def write(path: Path, rows: list[dict], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def summarize(out: Path) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, check=True)
    return done.stdout


def row(text: str, step: str) -> list[str]:
    [line] = [line for line in text.splitlines() if line.split()[:1] == [step]]
    return re.split(r"\s{2,}", line.strip())


def grpo_tree(out: Path) -> None:
    write(out / "grpo/sft_data.jsonl", [{"id": f"t{i}"} for i in range(4)])
    write(out / "grpo/rl_data.jsonl", [{"id": "s0"}, {"id": "s1"}])
    write(out / "grpo/train_rollouts.jsonl",
          [{"id": f"e{i}", "step": 1, "num_tool_calls": calls} for i, calls in enumerate([0, 1, 2, 3])]
          + [{"id": "late", "step": 2, "num_tool_calls": 9}])
    write(out / "grpo/rollouts.jsonl", [{"id": "r0", "reward": 0.5}, {"id": "r1", "reward": 1.0}])
    write(out / "grpo/rejects.train.jsonl", [{"id": "x", "reason": "prompt longer than max_prompt_length"}])
    write(out / "grpo/train/metrics.jsonl", [{"step": 1, "rollout/reward_mean": 0.25},
                                            {"step": 2, "rollout/reward_mean": 0.5}])


def test_counts_headline_numbers_and_skipped_steps(tmp_path):
    out = tmp_path / "demo"
    grpo_tree(out)
    write(out / "eval/oracle/bfcl.jsonl", [{"benchmark": "bfcl", "score": 1.0}] * 4)
    write(out / "eval/oracle_drop/bfcl.jsonl", [{"benchmark": "bfcl", "score": s} for s in (0.0, 0.0, 1.0, 0.0)],
          tail='{"benchmark": "bfcl", "sco')  # a line cut by an interrupted run
    write(out / "evolve/tasks.jsonl", [{"verification": {"verdict": "PASS"}}, {"verification": {"verdict": "FAIL"}}])
    write(out / "evolve/seed_verified_trajectories.jsonl", [{"verification": {"verdict": "SUCCESS"}}])
    (out / "timings.tsv").write_text("50-grpo\t300\n60-eval\t40\n50-grpo\t290\n95-view\t5\n")

    text = summarize(out)
    assert row(text, "50-grpo") == ["50-grpo", "6 trajectories and RL samples", "7 episodes", "1", "290 s"]
    assert row(text, "70-evolve")[2] == "2 tasks (1 PASS), 1 trajectories (1 SUCCESS)"
    assert row(text, "30-toolgraph")[1] == "skipped (no outputs)"
    assert row(text, "steps")[-1] == "5 min 30 s"  # 290 + 40: the newest time of each step, 95-view not counted
    assert "1.50 per episode (3 of 4 episodes call a tool" in text  # step 1 only: the SFT policy
    assert "0.250 at step 1 (before any update) -> 0.500 at step 2" in text
    assert "the trained policy's replay 0.750 over 2 episodes" in text
    assert "bfcl 100.0 (4 items)  [ground-truth replays]" in text
    assert "bfcl 25.0 (4 items)  [replays with 30% of BFCL calls left out]" in text


def test_an_empty_run_says_what_did_not_run(tmp_path):
    text = summarize(tmp_path)
    assert all(row(text, step)[1] == "skipped (no outputs)" for step in ("00-core", "50-grpo", "70-evolve"))
    assert "tool calls after SFT:    not run" in text and "benchmark scores:        not run" in text


def test_the_sandbox_row_shows_what_each_selftest_contained(tmp_path):
    out = tmp_path / "demo"
    write(out / "sandbox/requests.jsonl", [{"id": "a"}, {"id": "b"}])
    write(out / "sandbox/results.jsonl", [{"id": "a"}, {"id": "b"}])
    (out / "sandbox/selftest.txt").write_text("snippet  contained\n...\n\n16/16 hostile snippets tried, 16 contained\n")
    (out / "sandbox/selftest.log").write_text("selftest: 16 snippets in a jail of two users in 3.0s\n")
    (out / "sandbox/selftest_one_user.txt").write_text("...\n\n16/16 hostile snippets tried, 15 contained\n")
    (out / "sandbox/selftest_one_user.log").write_text("selftest: 16 snippets in a jail of one user in 2.9s\n")
    assert row(summarize(out), "10-sandbox")[2] == ("2 results; 16/16 hostile contained (two users); "
                                                    "15/16 hostile contained (one user)")


def test_the_families_row_counts_templates_and_formats_and_says_if_one_was_refused(tmp_path):
    out = tmp_path / "demo"
    doc = (Path(__file__).resolve().parents[1] / "docs" / "model-families.md").read_text()
    (out / "families").mkdir(parents=True)
    (out / "families" / "model-families.md").write_text(doc)  # what the step writes: the generated doc's table
    rows = [line.split(" | ") for line in doc.splitlines() if line.startswith("| `") and ".jinja`" in line]
    expected_in = f"{len(rows)} templates, {len({r[1] for r in rows})} reply formats"
    assert row(summarize(out), "52-families")[1:3] == [expected_in, "no refusal written"]

    (out / "families" / "refused.txt").write_text(
        "astra-grpo rollout: cannot load the policy: ... pass --response-template FILE|NAME\n")
    assert row(summarize(out), "52-families")[2] == "unreadable template refused at start"
