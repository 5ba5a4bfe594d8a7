"""Parity with the benchmarks' own harnesses: one scripted model, run through astra-eval and through
bfcl-eval's `bfcl generate` + `bfcl evaluate` / tau2's `tau2 run --skip-failed-samples`, on the same items.

The scripted model (tests/scripted.py, a real loopback HTTP server) replays ground truth with deterministic
perturbations: HTTP 400 refusals, tool arguments that are not JSON, empty replies, a loop past the step
limit, a dropped call. The tests assert equal per-item verdicts (and equal rewards, terminations and
pass^k for tau2), and equal request bodies, apart from the differences the README lists.
"""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess

import pytest
from eval_helpers import HELPERS, bench_python, cli, helper, records
from scripted import KINDS, BFCLModel, ScriptedEndpoint, Tau2Model, bfcl_plan, tau2_plan

BFCL_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
BFCL_MODEL = "openbmb/MiniCPM-SALA-FC"  # a registry name bfcl-eval serves with its plain OpenAI FC handler
BFCL_ONLY = {"store"}  # request fields bfcl-eval's OpenAI handler sends and astra-eval does not (README)


def canonical(body: dict, ignore: set[str] = frozenset()) -> str:
    return json.dumps({k: v for k, v in body.items() if k not in ignore}, sort_keys=True)


def bfcl_parity(tmp_path, limit: int) -> None:
    entries = helper("bfcl", "bfcl_items.py", str(limit), *BFCL_CATEGORIES)["entries"]
    plan = bfcl_plan(entries)
    with ScriptedEndpoint(BFCLModel(entries, plan), models=(BFCL_MODEL,)) as server:
        out = tmp_path / "ours.jsonl"
        cli("run", "bfcl", "--limit", str(limit), "--base-url", server.base_url, "--temperature", "0.001",
            "--concurrency", "8", "-o", str(out))
        ours_requests = server.take_requests()
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "scripted"}
        done = subprocess.run([bench_python("bfcl"), str(HELPERS / "bfcl_official.py"), str(tmp_path / "bfcl"),
                               BFCL_MODEL, json.dumps(sorted(entries))], capture_output=True, text=True, env=env,
                              timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        theirs = json.loads(done.stdout.strip().splitlines()[-1])
        their_requests = server.take_requests()
    assert not server.crashes
    ours = {r["item_id"]: r for r in records(out)}
    assert set(ours) == set(theirs) == set(entries)  # every entry scored, the erroring ones included
    assert {i: r["success"] for i, r in ours.items()} == theirs
    kinds = collections.Counter(plan[entries[i]["first_message"]] for i in entries)
    assert set(kinds) == set(KINDS)
    refused = [i for i in entries if plan[entries[i]["first_message"]] == "http400"]
    assert refused and all(ours[i]["error"].startswith("endpoint: ") and not ours[i]["success"] for i in refused)
    looped = [i for i in entries if plan[entries[i]["first_message"]] == "loop"]
    assert looped and all(ours[i]["details"]["force_quit"] for i in looped)
    assert 0 < sum(theirs.values()) < len(theirs)
    # The same requests, reasoning_content sent back in the history and BFCL's `response` schema in the tools.
    assert collections.Counter(canonical(b, BFCL_ONLY) for _, b in ours_requests) == \
        collections.Counter(canonical(b, BFCL_ONLY) for _, b in their_requests)
    assert all(b["store"] is False for _, b in their_requests)
    assert any("response" in t["function"] for _, b in ours_requests for t in b["tools"])
    assert any("reasoning_content" in m for _, b in ours_requests for m in b["messages"])


def test_bfcl_verdicts_and_requests_equal_bfcl_evals_own_generate_and_evaluate(tmp_path):
    bfcl_parity(tmp_path, limit=6)


@pytest.mark.slow
def test_bfcl_parity_on_all_800_entries(tmp_path):
    bfcl_parity(tmp_path, limit=200)


# -- tau2 -----------------------------------------------------------------------------------------------

TAU2_ARGS = {"max_steps": 30, "trials": 2}


def tau2_seeds(trials: int, base: int = 300) -> list[int]:
    rng = random.Random(base)  # what `tau2 run` does: random.seed(--seed, default 300), one randint per trial
    return [rng.randint(0, 1000000) for _ in range(trials)]


def tau2_official(server: ScriptedEndpoint, work, domain: str, task_ids: list[str]) -> dict:
    """`tau2 run` (its own CLI, in .venv-tau2) with --skip-failed-samples; returns its Results file and summary."""
    tau2 = os.path.join(os.path.dirname(bench_python("tau2")), "tau2")
    llm_args = json.dumps({"temperature": 0.0, "base_url": server.base_url})
    command = [tau2, "run", "--domain", domain, "--task-ids", *task_ids, "--num-trials", str(TAU2_ARGS["trials"]),
               "--max-steps", str(TAU2_ARGS["max_steps"]), "--agent-llm", "openai/scripted-agent",
               "--agent-llm-args", llm_args, "--user-llm", "openai/scripted-user", "--user-llm-args", llm_args,
               "--skip-failed-samples", "--results-dir", str(work), "--save-to", domain, "--max-concurrency", "4"]
    env = {**os.environ, "OPENAI_API_KEY": "scripted", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200, cwd=work)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return {"results": json.loads((work / f"{domain}.json").read_text()),
            "summary": json.loads((work / f"{domain}_results.json").read_text())}


def tau2_parity(tmp_path, limit: int) -> None:
    tasks = helper("tau2", "tau2_items.py", str(limit), "retail", "airline")
    seeds = tau2_seeds(TAU2_ARGS["trials"])
    plan = tau2_plan(tasks, seeds)
    with ScriptedEndpoint(Tau2Model(tasks, plan), models=("scripted-agent", "scripted-user")) as server:
        out = tmp_path / "ours.jsonl"
        cli("run", "tau2", "--domain", "retail", "--domain", "airline", "--limit", str(limit),
            "--trials", str(TAU2_ARGS["trials"]), "--max-steps", str(TAU2_ARGS["max_steps"]),
            "--base-url", server.base_url, "--model", "scripted-agent", "--user-model", "scripted-user",
            "--concurrency", "4", "-o", str(out))
        ours_requests = server.take_requests()
        theirs = {}
        for domain in ("retail", "airline"):
            theirs[domain] = tau2_official(server, tmp_path, domain, list(tasks[domain]))
        their_requests = server.take_requests()
    assert not server.crashes
    ours = records(out)
    assert len(ours) == sum(map(len, tasks.values())) * TAU2_ARGS["trials"]  # every trial scored
    assert {r["seed"] for r in ours} == set(seeds)
    errors = 0
    for domain, official in theirs.items():
        mine = {(r["item_id"], r["trial"]): r for r in ours if r["category"] == domain}
        their_runs = {(s["task_id"], s["trial"]): s for s in official["results"]["simulations"]}
        assert set(mine) == set(their_runs)
        for key, run in their_runs.items():
            record = mine[key]
            assert record["score"] == run["reward_info"]["reward"], key
            assert record["details"]["termination_reason"] == run["termination_reason"], key
            assert (record["error"] is not None) == bool(run.get("skipped")), key
        errors += sum(bool(run.get("skipped")) for run in their_runs.values())
        # The score `tau2 run --skip-failed-samples` reports, and its pass^k, are astra-eval's figures.
        figures = json.loads(cli("summary", "--json", str(out)).stdout)["scripted-agent"]
        label = {"retail": "Retail", "airline": "Airline"}[domain]
        metrics = official["summary"]["metrics"]
        assert figures[f"tau2-Bench: {label}"] == pytest.approx(100 * metrics["avg_reward"])
        for k, value in metrics["pass_at_k"].items():
            assert figures[f"tau2 {domain}: pass^{k}"] == pytest.approx(100 * value)
    kinds = collections.Counter(plan[(f"{r['category']}|{r['item_id']}", r["seed"])] for r in ours)
    assert set(kinds) == set(KINDS)
    assert errors == sum(r["error"] is not None for r in ours) > 0
    assert any(r["details"]["termination_reason"] == "max_steps" for r in ours)
    table = cli("summary", str(out)).stdout
    assert f"scripted-agent tau2: {errors} of {len(ours)} items" in table
    assert collections.Counter(canonical(b) for _, b in ours_requests) == \
        collections.Counter(canonical(b) for _, b in their_requests)


def test_tau2_rewards_and_requests_equal_tau2_run_with_failed_samples_scored_0(tmp_path):
    tau2_parity(tmp_path, limit=3)


@pytest.mark.slow
def test_tau2_parity_on_every_retail_and_airline_task(tmp_path):
    tau2_parity(tmp_path, limit=1000)
