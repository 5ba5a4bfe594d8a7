"""The astra-grpo command: sft, train (GRPO), rollout (a stage: `astra_grpo.play`), plot, configs.

Trainers run in one process as they are, or on many with accelerate:

    astra-grpo train samples.jsonl --config grpo_tiny_cpu.yaml --output-dir out/grpo
    accelerate launch --config_file $(astra-grpo configs --path accelerate/multi_gpu.yaml) \\
        -m astra_grpo.cli train samples.jsonl --config grpo_paper.yaml
"""

from __future__ import annotations

import functools
import os
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
    """A bad config, or a chat template we cannot render incrementally, is a one-line error."""
    from astra_grpo.chat import TemplateError

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except (ConfigError, TemplateError) as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


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

    final = train_grpo(config, list(inputs), skip_bad=skip_bad, rejects=rejects)
    _say_main(f"astra-grpo train: weights in {final}")


ROLLOUT_FIELDS = ("model", "seed", "chat_format", "reasoning", "chat_template_kwargs", "engine", "max_turns",
                  "max_prompt_length", "max_response_length", "max_new_tokens", "temperature", "top_p", "top_k",
                  "reward", "sandbox_pool_size", "sandbox_jail", "sandbox_call_timeout_s", "env_workers",
                  "generation_batch_size", "user_base_url", "user_model", "user_max_tokens", "max_user_turns",
                  "episodes", "samples_per_batch")


def open_player(config: RolloutConfig) -> Player:
    _quiet_transformers()
    return Player(config)


stage_command(main, "rollout", reads="rl_sample", writes="rollout", config=RolloutConfig, flags=ROLLOUT_FIELDS,
              uses={"player": open_player}, batch=lambda config: config.samples_per_batch,
              bundled_configs=bundled_configs())(play_samples)


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
