"""Click options every stage command shares, so all `astra-*` tools read and write alike (and the local servers'
`--port-file`).

    @main.command()
    @stage_options
    @llm_options
    def judge_task(**kwargs):
        options, llm = stage_options_from(kwargs), llm_config_from(kwargs)
        ...
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import click

from astra_core.llm.client import LLMConfig
from astra_core.stage import Shard, StageOptions


def _parse_shard(ctx: click.Context, param: click.Parameter, value: str | None) -> Shard | None:
    if value is None:
        return None
    try:
        return Shard.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _writable_port_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refused before the server starts (the embedded model loads its weights first), not after, in a traceback:
    a file is made where the port will be written (permission bits do not say so for root)."""
    if value is not None:
        directory = os.path.dirname(os.path.abspath(value))
        try:
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".astra-port-"):
                pass
        except OSError as exc:
            raise click.BadParameter(f"cannot write a file in {directory}: {exc.strerror}") from None
    return value


port_file_option = click.option(
    "--port-file", type=click.Path(dir_okay=False), callback=_writable_port_file,
    help="Write the bound port here once serving (atomically: whoever polls for the file never reads it empty).")


def _apply(options: list[Callable], f: Callable) -> Callable:
    for option in reversed(options):
        f = option(f)
    return f


# Under `astra-core ray` a stage's inputs may also be directories (astra_core.ray_stage reads their files).
inputs_may_be_directories: ContextVar[bool] = ContextVar("inputs_may_be_directories", default=False)


class _InputPath(click.Path):
    """An input file or '-' (a directory too under `astra-core ray`)."""

    def __init__(self) -> None:
        super().__init__(allow_dash=True, dir_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if inputs_may_be_directories.get():
            return value
        return super().convert(value, param, ctx)


def stage_options(f: Callable) -> Callable:
    """INPUTS..., -o/--output, --rejects, --shard i/n, --skip-bad, --resume, --progress/--no-progress, --fail-fast."""
    return _apply([
        click.argument("inputs", nargs=-1, type=_InputPath()),
        click.option("-o", "--output", default="-", show_default="stdout",
                     help="Write output records here (FILE.gz: gzip-compressed; FILE.parquet: parquet). Inputs may be "
                          "gzip, bzip2 or xz compressed."),
        click.option("--rejects", type=click.Path(dir_okay=False),
                     help="Write every dropped record here with the reason (JSONL)."),
        click.option("--shard", callback=_parse_shard, metavar="I/N",
                     help="Process only shard I of N (0-based); records are assigned by a hash of their id."),
        click.option("--skip-bad", is_flag=True,
                     help="Send malformed or invalid input lines to --rejects instead of stopping."),
        click.option("--resume", is_flag=True,
                     help="Append to -o FILE, skipping input ids already in it (or in --rejects)."),
        click.option("--progress/--no-progress", default=None, help="Progress on stderr: a bar on a terminal, else a status line every 15 s of a long run; "
                          "--no-progress: none."),
        click.option("--fail-fast", is_flag=True, help="Stop at the first error instead of rejecting the record."),
    ], f)


def stage_options_from(kwargs: dict[str, Any]) -> StageOptions:
    """Pop the stage options out of a command's kwargs (and silence known-harmless library noise: every stage
    command calls this before it loads anything)."""
    from astra_core.quiet import quiet_libraries

    quiet_libraries()
    inputs = tuple(kwargs.pop("inputs", ()) or ("-",))
    return StageOptions(inputs=inputs, output=kwargs.pop("output"), rejects=kwargs.pop("rejects"),
                        shard=kwargs.pop("shard"), skip_bad=kwargs.pop("skip_bad"), resume=kwargs.pop("resume"),
                        progress=kwargs.pop("progress"), fail_fast=kwargs.pop("fail_fast"))


def llm_options(f: Callable) -> Callable:
    """--base-url, --model, --api-key (env ASTRA_LLM_*), --concurrency, --max-retries, --timeout, --cache-dir,
    --temperature, --max-tokens, --seed."""
    return _apply([
        click.option("--base-url", envvar="ASTRA_LLM_BASE_URL",
                     help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 [env ASTRA_LLM_BASE_URL; "
                          "unset: start the embedded local model]"),
        click.option("--model", envvar="ASTRA_LLM_MODEL", help="Model name [env ASTRA_LLM_MODEL; default: the "
                                                               "endpoint's first model]"),
        click.option("--api-key", envvar="ASTRA_LLM_API_KEY", help="Bearer token [env ASTRA_LLM_API_KEY]"),
        click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True,
                     help="Requests in flight (>= 1)."),
        click.option("--max-retries", type=click.IntRange(min=0), default=5, show_default=True,
                     help="Retries of a failed request (>= 0)."),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
                     help="Seconds per request (> 0)."),
        click.option("--cache-dir", envvar="ASTRA_LLM_CACHE_DIR", type=click.Path(file_okay=False),
                     help="Cache replies on disk, keyed by the full request; shards on several machines may share "
                          "one on a network file system [env ASTRA_LLM_CACHE_DIR]."),
        click.option("--temperature", type=click.FloatRange(min=0), default=None, help="Sampling temperature (>= 0)."),
        click.option("--max-tokens", type=click.IntRange(min=1), default=None, help="Tokens per reply (>= 1)."),
        click.option("--seed", type=int, default=None, help="Sampling seed sent with each request."),
    ], f)


def llm_config_from(kwargs: dict[str, Any]) -> LLMConfig:
    """Pop the LLM options out of a command's kwargs."""
    names = ("base_url", "model", "api_key", "concurrency", "max_retries", "timeout", "cache_dir", "temperature",
             "max_tokens", "seed")
    values = {name: kwargs.pop(name) for name in names if name in kwargs}
    return LLMConfig.from_env(**values)


def report_errors(f: Callable) -> Callable:
    """Turn contract errors (bad lines, bad records, bad options, an optional dependency that is not installed)
    into a one-line message and exit 1."""
    from astra_core.extras import MissingExtra
    from astra_core.llm.client import LLMError
    from astra_core.schema import RecordError
    from astra_core.stage import StageError

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except (RecordError, StageError, LLMError, FileNotFoundError, MissingExtra) as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper
