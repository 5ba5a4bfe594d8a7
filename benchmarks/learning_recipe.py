"""The shared parts of the learning benchmarks (learning.py, learning_rewards.py, learning_mixing.py).

One run = programmatic qaenv data -> SFT warm start on gold trajectories -> online multi-turn GRPO from
the SFT weights -> held-out evaluation, on SmolLM2-135M-Instruct (the embedded default) on CPU.
Every phase leaves its result on disk and is skipped when it is already there, so a killed run
continues where it stopped when started again with the same command (GRPO resumes from its newest
saved training state). `Recipe` holds every setting; it is written beside the results as
config.json together with the command line and the git commit.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parent.parent
ARCHIVE = REPO / "benchmarks" / "results" / "learning_runs"  # finished ablation arms, committed


def setting(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class Recipe:
    """One learning run. Every field is a command-line flag of the benchmark scripts. The defaults are the
    recipe of benchmarks/results/learning.txt (+0.23 held-out F1 over SFT in 42 min of GRPO on 2 cores)."""

    seed: int = setting(0, "Seed of SFT/GRPO initialisation, data order and sampling.")
    max_hops: int = setting(2, "Longest question chain of the programmatic knowledge base.")
    mixing: str = setting("none", "Distractor tools of the GRPO training samples: none | random | bands.")
    eval_mixing: str = setting("none", "Distractor tools of the held-out samples: none | random | bands.")
    sft_mixing: str = setting("random", "Distractor tools in the SFT gold trajectories (one SFT checkpoint for every "
                                        "arm of every experiment).")
    reward: str = setting("f1", "GRPO reward: f1 | recall | precision (the paper's ablation).")
    held_out: int = setting(32, "Held-out samples (never trained on, by SFT or GRPO).")
    held_out_every: int = setting(5, "Every k-th sample is held out.")
    episodes: int = setting(4, "Episodes per held-out sample (temperature 1, as in training).")
    sft_steps: int = setting(12, "SFT optimizer steps (4 gold trajectories each).")
    sft_lr: float = setting(5e-5, "SFT learning rate.")
    grpo_steps: int = setting(20, "GRPO steps.")
    grpo_lr: float = setting(5e-5, "GRPO learning rate (constant).")
    batch: int = setting(4, "GRPO prompts (groups) per step.")
    group: int = setting(8, "Episodes per prompt.")
    abf_rounds: int = setting(1, "Adaptive Batch Filling: rollout rounds per step at most, to fill the batch with groups "
                                 "whose rewards vary (then it is topped up).")
    mini_batch: int = setting(0, "Groups per optimizer update (0: the whole batch, one update per step).")
    micro_batch: int = setting(4, "Sequences per forward/backward pass (peak memory grows with it: 4 peaked near 9 GB).")
    max_turns: int = setting(3, "Assistant turns per episode.")
    max_new_tokens: int = setting(144, "Tokens per assistant turn; must fit a turn of 3 parallel calls "
                                        "(the longest gold turn is 134 SmolLM2 tokens).")
    max_response_length: int = setting(512, "Tokens after the prompt per episode.")
    eval_every: int = setting(10, "Also evaluate the GRPO weights every this many steps (0: only the final).")
    pool_size: int = setting(32, "Live episodes (sandbox sessions) at once.")
    threads: int = setting(2, "torch CPU threads.")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, **defaults) -> None:
        for item in dataclasses.fields(cls):
            default = defaults.get(item.name, item.default)
            parser.add_argument(f"--{item.name.replace('_', '-')}", type=type(item.default), default=default,
                                help=f"{item.metadata['help']} [default: {default}]")

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides) -> Recipe:
        values = {item.name: getattr(args, item.name) for item in dataclasses.fields(cls)}
        return cls(**{**values, **overrides})


# The ablations' budget per arm: three arms of 20 steps with 4 evaluation episodes are ~3 h on 2 cores,
# more than one machine session; 6 steps and 2 episodes per held-out sample fit one or two arms a session.
ABLATION_BUDGET = {"grpo_steps": 6, "eval_every": 0, "episodes": 2}


def command_line(doc: str, **defaults) -> tuple[Recipe, Path]:
    """(the recipe of the flags, OUT) of a learning script; every flag is a Recipe field plus --out.
    Also silences known library noise and sets torch's threads."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out/learning")
    Recipe.add_arguments(parser, **defaults)
    args = parser.parse_args()
    recipe = Recipe.from_args(args)
    quiet_libraries(recipe.threads)
    return recipe, Path(args.out)


@dataclass
class Split:
    held: list[str]          # ids of the held-out samples
    train: list[dict]        # RL samples with the recipe's training mixing
    held_out: list[dict]     # the held-out samples with the recipe's evaluation mixing
    gold_train: list[dict]   # gold trajectories of the training samples (SFT data)


def prepare(data: Path, recipe: Recipe) -> Split:
    """The recipe's samples, split: one held-out set (by id) for every mixing."""
    samples, gold = samples_with(data, recipe, recipe.mixing)
    held = held_out_ids(samples, recipe)
    train, held_out, _ = split(samples, gold, held)
    held_out = split(*samples_with(data, recipe, recipe.eval_mixing), held)[1]
    gold_train = split(*samples_with(data, recipe, recipe.sft_mixing), held)[2]
    return Split(held, train, held_out, gold_train)


def quiet_libraries(threads: int) -> None:
    import torch
    from astra_core.quiet import quiet_libraries as silence_known_noise
    from transformers.utils import logging

    silence_known_noise()
    torch.set_num_threads(threads)
    logging.set_verbosity_error()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def write_config(out: Path, experiment: str, recipes: dict[str, Recipe]) -> None:
    """OUT/config.<experiment>.json beside the results: how to reproduce them."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"config.{experiment}.json").write_text(json.dumps(
        {"command": " ".join([Path(sys.executable).name, *sys.argv]), "commit": commit,
         "runs": {name: dataclasses.asdict(recipe) for name, recipe in recipes.items()}}, indent=1))


# -- data --------------------------------------------------------------------------------------------

def _sh(command: str, cwd: Path) -> None:
    # The astra-* console scripts sit next to this interpreter; the venv need not be activated.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["bash", "-c", f"set -euo pipefail; {command}"], cwd=cwd, check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def samples_with(data: Path, recipe: Recipe, mixing: str) -> tuple[list[dict], list[dict]]:
    """(RL samples, their gold trajectories) of the bundled knowledge base with `mixing` distractors.
    The same environments under every mixing, so sample ids (and the held-out split) agree."""
    data.mkdir(parents=True, exist_ok=True)
    if not (data / "env.jsonl").exists():
        _sh(f"astra-qaenv sample-data entities > starts.jsonl && "
            f"astra-qaenv programmatic starts.jsonl --max-hops {recipe.max_hops} -o qa.jsonl && "
            "astra-qaenv validate --no-judge qa.jsonl -o valid.jsonl && "
            "astra-qaenv build-env valid.jsonl -o env.jsonl.tmp && mv env.jsonl.tmp env.jsonl", data)
    target = data / f"rl_samples.{mixing}.jsonl"
    if not target.exists():
        _sh(f"astra-qaenv export env.jsonl --mixing {mixing} --mix-seed {recipe.seed} -o rl.tmp "
            f"--gold-trajectories gold.{mixing}.jsonl && mv rl.tmp {target.name}", data)
    return _read(target), _read(data / f"gold.{mixing}.jsonl")


def held_out_ids(samples: list[dict], recipe: Recipe) -> list[str]:
    return [s["id"] for s in samples[::recipe.held_out_every][:recipe.held_out]]


def split(samples: list[dict], gold: list[dict], held: list[str]) -> tuple[list[dict], list[dict], list[dict]]:
    """(train samples, held-out samples, gold trajectories of the train samples)."""
    held_set = set(held)
    by_id = {s["id"]: s for s in samples}
    train = [s for s in samples if s["id"] not in held_set]
    gold_train = [t for t in gold if t.get("task_id") in by_id and t["task_id"] not in held_set]
    return train, [by_id[i] for i in held], gold_train


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# -- training ----------------------------------------------------------------------------------------

def sft_once(out: Path, gold_train: list[dict], held: list[str], recipe: Recipe) -> Path:
    """SFT on the gold trajectories of the training samples; reused when out/final was trained with the
    same settings and held-out split."""
    from astra_grpo.config import SFTConfig, load_config
    from astra_grpo.sft import train_sft

    key = {"held_out": held, "steps": recipe.sft_steps, "lr": recipe.sft_lr, "seed": recipe.seed,
           "gold": len(gold_train), "mixing": recipe.sft_mixing}
    stamp = out / "sft_settings.json"
    if (out / "final").is_dir() and stamp.exists() and json.loads(stamp.read_text()) == key:
        log(f"SFT: reusing {out / 'final'}")
        return out / "final"
    log(f"SFT: {recipe.sft_steps} steps on {len(gold_train)} gold trajectories")
    config = load_config(SFTConfig, None, dict(
        output_dir=str(out), batch_size=4, micro_batch_size=1, max_steps=recipe.sft_steps, seed=recipe.seed,
        learning_rate=recipe.sft_lr, max_length=1536, warmup_ratio=0.1, report_to=[], save_weights_steps=0,
        save_state_steps=3, resume=True))  # a killed SFT continues from its last state
    final = train_sft(config, [str(write_jsonl(out / "gold_train.jsonl", gold_train))])
    stamp.write_text(json.dumps(key))
    return final


def grpo_dir(root: Path, recipe: Recipe) -> Path:
    """A GRPO run's directory, named by its reward, training mixing and a digest of every setting it
    depends on: runs of different experiments with the same settings share it (and its evaluations)."""
    ignored = ("eval_mixing", "pool_size", "threads", "micro_batch", "eval_every")  # do not change the updates
    settings = {k: v for k, v in dataclasses.asdict(recipe).items() if k not in ignored}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return root / f"grpo-{recipe.reward}-{recipe.mixing}-{digest}"


def grpo(out: Path, sft_dir: Path, train: list[dict], recipe: Recipe, pool) -> Path:
    """GRPO from the SFT weights into `out`; resumes from out/state after a kill; returns the final weights."""
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.grpo import train_grpo

    final = out / "final"
    if final.is_dir() and _steps_done(out) >= recipe.grpo_steps:
        log(f"GRPO: {out} is complete")
        return final
    log(f"GRPO -> {out}: {recipe.grpo_steps} steps, {recipe.batch} prompts x {recipe.group} episodes, "
        f"reward {recipe.reward}, {recipe.mixing} distractors")
    config = load_config(GRPOConfig, None, dict(
        model=str(sft_dir), output_dir=str(out), seed=recipe.seed, batch_size=recipe.batch,
        group_size=recipe.group, mini_batch_size=recipe.mini_batch or recipe.batch,
        micro_batch_size=recipe.micro_batch,
        max_steps=recipe.grpo_steps, learning_rate=recipe.grpo_lr, reward=recipe.reward,
        max_turns=recipe.max_turns, max_new_tokens=recipe.max_new_tokens,
        max_response_length=recipe.max_response_length, abf_max_rounds=recipe.abf_rounds,
        sandbox_pool_size=recipe.pool_size, generation_batch_size=32, report_to=[], save_weights_steps=recipe.eval_every,
        save_state_steps=2, resume=True, rollouts_out=str(out / "rollouts.jsonl")))
    return train_grpo(config, [str(write_jsonl(out / "train.jsonl", train))], pool=pool)


def run_arm(root: Path, sft_dir: Path, sft_eval: dict, train: list[dict], held_out: list[dict], recipe: Recipe,
            pool, cache: Path, archive: Path | None = None) -> tuple[Path, dict, dict[int, float]]:
    """GRPO from the SFT weights, then its held-out evaluation: (run directory, final metrics,
    held-out F1 by step with step 0 = SFT). With `archive`, a finished arm's metrics and evaluations are
    kept there (committed: `out/` does not outlive a machine), and an arm found there is not run again."""
    run = grpo_dir(root, recipe)
    kept_in = archive / _archive_name(run, recipe) if archive is not None else None
    if kept_in is not None and (kept := _archived_arm(kept_in, sft_dir, held_out, recipe)) is not None:
        return kept
    final = grpo(run, sft_dir, train, recipe, pool)
    curve = {0: sft_eval["f1"]}
    for step, weights in weights_by_step(run).items():
        curve[step] = cached_evaluate(weights, held_out, recipe, pool, cache)["f1"]
    result = cached_evaluate(final, held_out, recipe, pool, cache)
    if kept_in is not None:
        _archive_arm(kept_in, run, sft_dir, held_out, recipe, result, curve)
    return run, result, curve


def _archive_name(run: Path, recipe: Recipe) -> str:
    """One archived arm per run and held-out set: the same GRPO run (the reward ablation's F1 arm is the mixing
    ablation's no-distractor arm) is evaluated on held-out samples with other distractors under another name."""
    return run.name if recipe.eval_mixing == "none" else f"{run.name}-eval-{recipe.eval_mixing}"


def weights_digest(model_dir: Path) -> str:
    """sha256 of a checkpoint's weights file: which SFT checkpoint an archived arm started from."""
    digest = hashlib.sha256()
    with open(Path(model_dir) / "model.safetensors", "rb") as weights:
        for block in iter(lambda: weights.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def _archive_arm(kept: Path, run: Path, sft_dir: Path, held_out: list[dict], recipe: Recipe, final: dict,
                 curve: dict[int, float]) -> None:
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text())
    (kept / "arm.json").write_text(json.dumps(
        {"sft_weights_sha256": weights_digest(sft_dir), "held_out": [s["id"] for s in held_out],
         "eval_mixing": recipe.eval_mixing, "final": final, "held_out_f1_by_step": curve}, indent=1))
    log(f"GRPO: {run.name}'s metrics and evaluation kept in {kept}")


def _archived_arm(kept: Path, sft_dir: Path, held_out: list[dict],
                  recipe: Recipe) -> tuple[Path, dict, dict[int, float]] | None:
    if not (kept / "arm.json").exists():
        return None
    arm = json.loads((kept / "arm.json").read_text())
    # arms archived before the field was written were all evaluated without distractors
    if (arm["sft_weights_sha256"] != weights_digest(sft_dir) or arm["held_out"] != [s["id"] for s in held_out]
            or arm.get("eval_mixing", "none") != recipe.eval_mixing):
        raise SystemExit(f"{kept}: this arm started from another SFT checkpoint, or was evaluated on another held-out set "
                         "(samples or their distractors), than this run's; "
                         "the arms of one ablation must share them: remove the archived arms and run them all again")
    log(f"GRPO: {kept.name} from its archived metrics and evaluation ({kept})")
    return kept, arm["final"], {int(step): f1 for step, f1 in arm["held_out_f1_by_step"].items()}


def archived_evaluate(model_dir: Path, samples: list[dict], recipe: Recipe, pool, cache: Path,
                      archive: Path) -> dict:
    """`cached_evaluate` of a checkpoint that is trained again on every machine (the SFT warm start,
    deterministic): its result is archived by the weights' digest, so a new machine skips it."""
    budget = json.dumps(_evaluation_budget(samples, recipe), sort_keys=True)
    key = f"{weights_digest(model_dir)[:16]}-{hashlib.sha256(budget.encode()).hexdigest()[:16]}"
    kept = archive / "evaluations.json"
    known = json.loads(kept.read_text()) if kept.exists() else {}
    if key not in known:
        archive.mkdir(parents=True, exist_ok=True)
        known[key] = cached_evaluate(model_dir, samples, recipe, pool, cache)
        kept.write_text(json.dumps(known, indent=1))
    return known[key]


def _steps_done(run: Path) -> int:
    metrics = run / "metrics.jsonl"
    return max((row["step"] for row in _read(metrics)), default=0) if metrics.exists() else 0


def grpo_seconds(run: Path, up_to: int | None = None) -> float:
    """Wall time of the GRPO steps (rollouts + updates, summed over restarts), of steps <= `up_to` if given."""
    return sum(row.get("rollout_seconds", 0) + row.get("update_seconds", 0) for row in read_metrics(run)
               if up_to is None or row["step"] <= up_to)


def weights_by_step(run: Path) -> dict[int, Path]:
    """Saved GRPO weights by step (weights/step-N every eval_every steps, and final)."""
    saved = {int(p.name.split("-")[1]): p for p in sorted((run / "weights").glob("step-*"))}
    saved[_steps_done(run)] = run / "final"
    return saved


# -- evaluation --------------------------------------------------------------------------------------

def evaluate(model_dir: Path | None, samples: list[dict], recipe: Recipe, pool) -> dict:
    """Held-out metrics of one policy: mean over `episodes` episodes per sample at temperature 1."""
    import torch
    from astra_core.progress import Progress
    from astra_grpo.chat import ChatRenderer
    from astra_grpo.config import GRPOConfig, load_config
    from astra_grpo.engines import Sampling
    from astra_grpo.engines.transformers import TransformersEngine
    from astra_grpo.rollout import EpisodeRunner, RolloutSettings
    from astra_grpo.runtime import load_policy

    torch.manual_seed(1234 + recipe.seed)
    model, tokenizer = load_policy(load_config(GRPOConfig, None, {"model": str(model_dir) if model_dir else None}))
    renderer = ChatRenderer(tokenizer)
    engine = TransformersEngine(model, tokenizer.pad_token_id, renderer.stop_ids, batch_size=32)
    settings = RolloutSettings(max_turns=recipe.max_turns, max_response_length=recipe.max_response_length,
                               max_new_tokens=recipe.max_new_tokens, sampling=Sampling(1.0),
                               max_live_episodes=recipe.pool_size)
    runner = EpisodeRunner(engine, renderer, pool, settings)
    per_call = max(1, recipe.pool_size // recipe.episodes)  # one wave of live episodes per call
    groups = []
    with Progress(f"evaluating {model_dir.name if model_dir else 'base'}", len(samples) * recipe.episodes,
                  unit="episode") as progress:
        for start in range(0, len(samples), per_call):
            groups += runner.play(samples[start:start + per_call], recipe.episodes)
            progress.update(len(samples[start:start + per_call]) * recipe.episodes)
    episodes = [e for g in groups for e in g.episodes]
    calls = sum(e.tool_calls for e in episodes)
    formed = calls - sum(e.malformed_calls for e in episodes)
    wrong = sum(_distractor_calls(e) for e in episodes)
    return {"f1": statistics.fmean(e.reward for e in episodes),
            "per_sample_f1": {g.sample_id: statistics.fmean(e.reward for e in g.episodes) for g in groups},
            "recall": statistics.fmean(e.reward_components.get("recall", 0.0) for e in episodes),
            "precision": statistics.fmean(e.reward_components.get("precision", 0.0) for e in episodes),
            "turns": statistics.fmean(e.turns for e in episodes),
            "tool_calls": calls / len(episodes),
            "format_validity": formed / calls if calls else float("nan"),
            "wrong_tool_rate": wrong / formed if formed else float("nan"),
            "episodes_with_a_call": sum(e.tool_calls > 0 for e in episodes) / len(episodes)}


def _distractor_calls(episode) -> int:
    """Well-formed calls to a tool that was mixed in as irrelevant to the sample's task."""
    distractors = set(episode.sample.get("distractors") or [])
    return sum(call["function"]["name"] in distractors
               for message in episode.messages if message.get("role") == "assistant"
               for call in message.get("tool_calls") or [])


def cached_evaluate(model_dir: Path | None, samples: list[dict], recipe: Recipe, pool, cache_file: Path) -> dict:
    """`evaluate`, reusing an earlier result for the same weights, samples and budgets."""
    weights = Path(model_dir) / "model.safetensors" if model_dir else None
    key = json.dumps({"model": str(model_dir) if model_dir else None,
                      "weights_mtime": weights.stat().st_mtime if weights else None,
                      **_evaluation_budget(samples, recipe)}, sort_keys=True)
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    if key not in cache:
        log(f"evaluating {model_dir or 'the base model'} on {len(samples)} held-out samples x {recipe.episodes}")
        cache[key] = evaluate(model_dir, samples, recipe, pool)
        cache = {**(json.loads(cache_file.read_text()) if cache_file.exists() else {}), key: cache[key]}
        cache_file.write_text(json.dumps(cache, indent=1))
    return cache[key]


def _evaluation_budget(samples: list[dict], recipe: Recipe) -> dict:
    """What an evaluation's result depends on besides the weights."""
    return {"samples": [s["id"] for s in samples], "tools": sum(len(s["tools"]) for s in samples),
            "episodes": recipe.episodes, "max_turns": recipe.max_turns, "seed": recipe.seed,
            "max_new_tokens": recipe.max_new_tokens, "max_response_length": recipe.max_response_length}


def paired_interval(before: dict, after: dict, confidence: float = 0.95) -> dict:
    """Per-sample F1 change after - before: mean, its t-interval, and how many samples rose / fell."""
    from scipy import stats

    diffs = [after["per_sample_f1"][sid] - before["per_sample_f1"][sid] for sid in before["per_sample_f1"]]
    mean, n = statistics.fmean(diffs), len(diffs)
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * statistics.stdev(diffs) / n ** 0.5 if n > 1 else float("nan")
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n,
            "better": sum(d > 0 for d in diffs), "worse": sum(d < 0 for d in diffs)}


def open_pool(recipe: Recipe):
    from astra_grpo.environments import open_sandbox_pool

    return open_sandbox_pool(recipe.pool_size, call_timeout_s=5.0)


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# -- figures -----------------------------------------------------------------------------------------

# (metric, panel title, y axis): each run's training reward is the one it trains on (an ablation's arms differ).
CURVES = [("rollout/reward_mean", "training reward (the run's own reward)", "reward, 0-1 (mean over rollouts)"),
          ("rollout/tool_calls_mean", "tool calls per trajectory", "tool calls (mean)"),
          ("rollout/turns_mean", "assistant turns per trajectory", "assistant turns (mean)")]
HELD_OUT_PANEL = ("held-out F1 (step 0: SFT)", "F1, 0-1 (mean over held-out episodes)")


def plot_curves(runs: dict[str, Path], held_out_f1: dict[str, dict[int, float]], output: Path, title: str,
                window: int = 3) -> None:
    """One line per run: its GRPO training curves (smoothed over `window` steps) and its held-out F1 at
    the evaluated steps (step 0 = the SFT checkpoint every run starts from)."""
    from astra_grpo.plot import pyplot, read_metrics, smooth
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    figure, axes = plt.subplots(1, len(CURVES) + 1, figsize=(4.2 * (len(CURVES) + 1), 3.6))
    for label, run in runs.items():
        history = read_metrics(run)
        for axis, (metric, _, _) in zip(axes, CURVES, strict=False):
            points = [(row["step"], row[metric]) for row in history if metric in row]
            if points:
                steps, values = zip(*points, strict=True)
                axis.plot(steps, smooth(list(values), window), label=label, linewidth=1.6)
        evaluated = sorted(held_out_f1.get(label, {}).items())
        if evaluated:
            axes[-1].plot(*zip(*evaluated, strict=True), marker="o", label=label, linewidth=1.6)
    for axis, (name, unit) in zip(axes, [(t, u) for _, t, u in CURVES] + [HELD_OUT_PANEL], strict=True):
        axis.set_title(name, fontsize=10)
        axis.set_xlabel("GRPO step")
        axis.set_ylabel(unit, fontsize=8)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    figure.suptitle(title, fontsize=11)
    figure.tight_layout(rect=(0, 0.08, 1, 0.95))  # the legend sits below the panels, never over data
    figure.savefig(output, dpi=110)
    plt.close(figure)


def read_metrics(run: Path) -> list[dict]:
    """A GRPO run's metrics.jsonl rows."""
    return _read(run / "metrics.jsonl")
