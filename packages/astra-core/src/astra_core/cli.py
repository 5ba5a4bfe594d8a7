"""The astra-core command: serve the embedded model, validate records, print schemas, view records."""

from __future__ import annotations

import contextlib
import json
import sys

import click

from astra_core.command import stage_command
from astra_core.jsonl import MalformedLine
from astra_core.options import port_file_option, report_errors, stage_options, stage_options_from
from astra_core.records import KINDS
from astra_core.schema import errors, schema
from astra_core.stage import Rejected, Stage
from astra_core.verl import VerlConfig, verl_row


@click.group("astra-core")
@click.version_option(package_name="astra-agent-core")
def main() -> None:
    """Shared pieces of the ASTRA toolkit: the JSONL contract and the embedded local model."""


@main.command()
@click.option("--model", default=None, help="Local checkpoint directory (default: bundled SmolLM2-135M-Instruct).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0 picks a free port.")
@port_file_option
@click.option("--threads", type=int, default=None, help="torch threads (default: torch's choice).")
@click.option("--max-batch", type=int, default=8, show_default=True, help="Requests generated together.")
@click.option("--prefix-cache-tokens", type=click.IntRange(min=0), default=16384, show_default=True,
              help="Prompt KV caches kept between requests, in tokens: a prompt that extends an earlier one (the "
                   "next turn of a conversation) reads only its new tokens. 0: off.")
@click.option("--max-tokens-cap", type=int, default=2048, show_default=True,
              help="Upper bound on max_tokens for any request.")
@click.option("--exit-with-parent", is_flag=True,
              help="Stop when the process that started this one ends, however it ends (a stage's embedded model).")
@click.option("--response-template", default=None,
              help="How replies are read when the model's chat template renders tools: a JSON file holding a "
                   "transformers response_template, or a known format's name (default: the checkpoint's own, else "
                   "the known one that reads back what its chat template writes).")
def serve(model, host, port, port_file, threads, max_batch, prefix_cache_tokens, max_tokens_cap,
          exit_with_parent, response_template) -> None:
    """Serve a local model with an OpenAI-compatible API (chat completions with tools, the model's own way)."""
    from astra_core.http_server import CannotListen
    from astra_core.local.model import ModelNotAvailable
    from astra_core.local.server import serve as run_server
    from astra_core.quiet import quiet_libraries

    quiet_libraries()
    try:
        run_server(model, host=host, port=port, port_file=port_file, threads=threads, max_batch=max_batch,
                   prefix_cache_tokens=prefix_cache_tokens, max_tokens_cap=max_tokens_cap,
                   exit_with_parent=exit_with_parent, response_template=response_template)
    except (ModelNotAvailable, CannotListen) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.argument("kind", type=click.Choice(KINDS))
@stage_options
@report_errors
def validate(kind: str, **kwargs) -> None:
    """Check records against KIND's schema; valid records pass through, invalid ones are rejected with every error."""
    options = stage_options_from(kwargs)

    def check(record: dict) -> dict:
        problems = errors(record, kind)
        if problems:
            raise Rejected("invalid: " + "; ".join(f"{p.field}: {p.message}" for p in problems))
        return record

    try:
        with Stage("astra-core validate", options) as stage:
            stage.run(check)
    except MalformedLine as exc:
        raise click.ClickException(str(exc)) from exc
    if stage.counts.rejected:
        sys.exit(1)


@main.command("schema")
@click.argument("kind", type=click.Choice(KINDS))
def print_schema(kind: str) -> None:
    """Print the JSON Schema of a record kind."""
    click.echo(json.dumps(schema(kind), indent=2, ensure_ascii=False))


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("-o", "--output", type=click.File("w", encoding="utf-8", lazy=True), default="report.html",
              show_default=True, help="The HTML report ('-' for stdout).")
@click.option("--serve", "serve_", is_flag=True,
              help="Serve the report on 127.0.0.1 instead, its records fetched page by page (for large files).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port for --serve; 0 picks a free one.")
@click.option("--title", default="ASTRA records", show_default=True, help="The page's title.")
def view(files, output, serve_, port, title) -> None:
    """Browse records of any kinds, and rejects, in one self-contained HTML page (FILES may be - for stdin)."""
    from astra_core import view as viewer
    from astra_core.jsonl import UnreadableInput
    from astra_core.view.report import render

    try:
        if serve_:
            _serve_view(list(files), port, title)
            return
        entries = viewer.load(files)
    except UnreadableInput as exc:  # compressed data that breaks off, or zstd: nothing to show of the file's end
        raise click.ClickException(str(exc)) from None
    output.write(render(entries, title))
    target = "<stdout>" if output.name == "-" else output.name
    click.echo(f"view: {viewer.counts(entries, len(files)).text()} -> {target}", err=True)


def _serve_view(files: list[str], port: int, title: str) -> None:
    from astra_core.http_server import CannotListen, serve_until_stopped
    from astra_core.view import counts
    from astra_core.view.serve import Index, make_server

    try:  # Ctrl-C and `kill` stop it alike, and the spooled copy of stdin is removed
        with contextlib.closing(Index(files)) as index, make_server(index, port, title) as server:
            click.echo(f"view: {counts(index.summaries, len(files)).text()} at "
                       f"http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", err=True)
            serve_until_stopped(server)
    except CannotListen as exc:
        raise click.ClickException(str(exc)) from None


stage_command(main, "to-verl", reads="rl_sample", config=VerlConfig, ordered=True)(verl_row)


@main.command("ray", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--address", help="The Ray cluster: host:port of its head, or `auto` for the one `ray start` started on "
                                 "this machine [env RAY_ADDRESS; unset: a local Ray of this run, on 127.0.0.1].")
@click.option("--actors", type=click.IntRange(min=1),
              help="Actors running the stage, each with its own resources (LLM clients, sandbox pool, ...) "
                   "[default: the cluster's CPUs / --cpus-per-actor, at most one per batch].")
@click.option("--cpus-per-actor", type=click.FloatRange(min=0, min_open=True), default=1.0,
              help="CPUs Ray reserves for each actor; below 1 packs several I/O-bound actors on a CPU [default: 1].")
@click.option("--batch-size", type=click.IntRange(min=1),
              help="Input lines per batch, the unit an actor takes and Ray retries [default: the stage's own batch; "
                   "8 x its --concurrency for an async stage; else 64].")
@click.option("--worker-deaths", type=click.IntRange(min=1), default=3,
              help="Deaths of a batch's worker (a lost node, an out-of-memory kill) before its records run one at a "
                   "time; a record whose worker dies this often running it alone is rejected with the reason "
                   "[default: 3].")
@click.argument("words", nargs=-1, required=True, type=click.UNPROCESSED, metavar="COMMAND [ARGS]...")
def ray(address, actors, cpus_per_actor, batch_size, worker_deaths, words) -> None:
    """Run a stage command on a Ray cluster with Ray Data (docs/ray.md): `astra-core ray astra-toolgraph walk graphs/`.

    \b
    The stage runs as its command declares it: the same records, rejects, reasons and counts as in one process
    (order aside). Its inputs are files, directories or URIs (s3://...), JSONL or Parquet; each is checked first
    (a bad line without --skip-bad stops the run before any record is processed). Actors open the stage's
    resources once and run batches of its records (an async stage keeps --concurrency in flight in each actor);
    outputs, rejects and counts come back here, to -o and --rejects as in one process (--resume included).
    Needs astra-agent-core[ray].
    """
    from astra_core.command import stage_runner
    from astra_core.options import inputs_may_be_directories
    from astra_core.ray_stage import RayOptions, find_stage, runner

    group, program, args = find_stage(list(words))
    settings = RayOptions(address, actors, cpus_per_actor, batch_size, worker_deaths)
    runs_on_ray, directories = stage_runner.set(runner(settings)), inputs_may_be_directories.set(True)
    try:
        group.main(args=args, prog_name=program)
    finally:
        stage_runner.reset(runs_on_ray)
        inputs_may_be_directories.reset(directories)


@main.command("cli-doc")
def cli_doc() -> None:
    """Print docs/cli.md (generated from every installed astra-* command)."""
    from astra_core.cli_doc import render

    click.echo(render(), nl=False)


@main.command("formats-doc")
def formats_doc() -> None:
    """Print docs/formats.md (generated from the schemas and their examples)."""
    from astra_core.formats_doc import render

    click.echo(render(), nl=False)


if __name__ == "__main__":
    main()
