"""Parity with the benchmarks' own harnesses: one scripted model, run through astra-eval and through
bfcl-eval's `bfcl generate` + `bfcl evaluate` / tau2's `tau2 run --skip-failed-samples`, on the same items.

The scripted model (tests/eval_scripted.py, a real loopback HTTP server) replays ground truth with deterministic
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
from eval_scripted import KINDS, BFCLModel, ScriptedEndpoint, Tau2Model, bfcl_plan, tau2_plan

BFCL_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
BFCL_MODEL = "openbmb/MiniCPM-SALA-FC"  # a registry name bfcl-eval serves with its plain OpenAI FC handler
QWEN_MODEL = "Qwen/Qwen3-8B-FC"  # bfcl-eval's Qwen FC handler (a local-model handler: completions endpoint)
MODEL_CONFIG = {BFCL_MODEL: "openbmb/MiniCPM-SALA-FC", QWEN_MODEL: "Qwen/Qwen3-8B"}  # the names they request
BFCL_ONLY = {"store"}  # request fields bfcl-eval's OpenAI handler sends and astra-eval does not (README)


def canonical(body: dict, ignore: set[str] = frozenset()) -> str:
    return json.dumps({k: v for k, v in body.items() if k not in ignore}, sort_keys=True)


def bfcl_runs(tmp_path, limit: int, model: str, ours_args: list[str], their_env: dict):
    """The scripted model through astra-eval (`ours_args`) and through `bfcl generate` + `bfcl evaluate` with
    bfcl-eval's `model`: (entries, plan, our records by id, their verdicts by id, our requests, their requests)."""
    entries = helper("bfcl", "bfcl_items.py", str(limit), *BFCL_CATEGORIES)["entries"]
    plan = bfcl_plan(entries)
    served = MODEL_CONFIG[model]
    with ScriptedEndpoint(BFCLModel(entries, plan), models=(served,)) as server:
        out = tmp_path / "ours.jsonl"
        cli("run", "bfcl", "--limit", str(limit), "--base-url", server.base_url, "--concurrency", "8", *ours_args,
            "-o", str(out))
        ours_requests = server.take_requests()
        env = {**os.environ, **{k: v.format(url=server.base_url) for k, v in their_env.items()}}
        done = subprocess.run([bench_python("bfcl"), str(HELPERS / "bfcl_official.py"), str(tmp_path / "bfcl"),
                               model, json.dumps(sorted(entries))], capture_output=True, text=True, env=env,
                              timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        theirs = json.loads(done.stdout.strip().splitlines()[-1])
        their_requests = server.take_requests()
    assert not server.crashes
    ours = {r["item_id"]: r for r in records(out)}
    assert set(ours) == set(theirs) == set(entries)  # every entry scored, the erroring ones included
    assert {i: r["success"] for i, r in ours.items()} == theirs
    assert 0 < sum(theirs.values()) < len(theirs)
    # (An entry may be played as the first entry sharing its user turns, whose calls can come at another turn:
    # so the perturbation's effect is checked one way, every error comes from a refusal, and not for all.)
    errored = {i for i, r in ours.items() if r["error"]}
    assert errored and errored <= planned(entries, plan, "http400")
    assert not any(ours[i]["success"] for i in errored)
    return entries, plan, ours, ours_requests, their_requests


def planned(entries: dict, plan: dict, kind: str) -> set[str]:
    return {i for i, entry in entries.items() if plan[entry["first_message"]] == kind}


def bfcl_parity(tmp_path, limit: int) -> None:
    entries, plan, ours, ours_requests, their_requests = bfcl_runs(
        tmp_path, limit, BFCL_MODEL, ["--temperature", "0.001"],
        {"OPENAI_BASE_URL": "{url}", "OPENAI_API_KEY": "scripted"})
    assert set(plan[e["first_message"]] for e in entries.values()) == set(KINDS)
    assert all(r["error"].startswith("endpoint: ") and "HTTP 400" in r["error"] for r in ours.values() if r["error"])
    quit = {i for i, r in ours.items() if r["details"].get("force_quit")}  # past BFCL's step limit
    assert quit and quit <= planned(entries, plan, "loop")
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


@pytest.mark.slow  # ~1.5 min, mostly two imports of bfcl-eval's model registry and transformers
def test_bfcl_handler_route_plays_as_bfcl_generate_with_that_handler(tmp_path):
    # The leaderboard's route for Qwen3: bfcl-eval's Qwen FC handler writes the prompt itself and queries a
    # completions endpoint; astra-eval --handler drives that very handler. Same prompts, same verdicts.
    from astra_core.local.model import default_model_dir

    tokenizer = str(default_model_dir())  # any local tokenizer: the handler only counts prompt tokens with it
    entries, plan, ours, ours_requests, their_requests = bfcl_runs(
        tmp_path, 3, QWEN_MODEL, ["--handler", QWEN_MODEL, "--tokenizer", tokenizer],
        {"REMOTE_OPENAI_BASE_URL": "{url}", "REMOTE_OPENAI_TOKENIZER_PATH": tokenizer})
    assert all(path.endswith("/completions") and "prompt" in body for path, body in ours_requests)
    assert collections.Counter(canonical(b) for _, b in ours_requests) == \
        collections.Counter(canonical(b) for _, b in their_requests)
    assert all(b["temperature"] == 0.001 and b["model"] == "Qwen/Qwen3-8B" for _, b in ours_requests)
    assert all(r["details"]["handler"] == "QwenFCHandler" for r in ours.values() if not r["error"])


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
