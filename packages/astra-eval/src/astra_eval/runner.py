"""Running eval items through a `Stage`: concurrency limit, per-item timeout, resume and shards.

Every benchmark adapter provides `async run_item(item) -> eval_result`. The runner applies it to
item records (from files or generated from the benchmark's selection options) and writes one
eval_result per item. Every item attempted is scored: any error while it runs (timeout, an endpoint
that refuses the request, the model's malformed or empty reply, an exception inside the benchmark's code)
makes it a failure with score 0 and its error (`astra_eval.errors`). An endpoint that does not answer at
all (no connection after every retry) or refuses the API key stops the run instead: the items done are kept,
--resume runs the rest. --rejects receives only malformed input items and items that hit a bug in astra-eval itself; the
latter make the command exit non-zero.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import contextmanager

from astra_core.jsonl import dumps
from astra_core.llm import LLMUnavailable
from astra_core.stage import Rejected, Stage, StageOptions

from astra_eval.errors import HarnessError, describe, raised_by_harness
from astra_eval.results import check_item, failure

RunItem = Callable[[dict], Awaitable[dict]]


def guarded(run_item: RunItem, item_timeout: float | None) -> RunItem:
    """`run_item` with a wall-clock limit; any error while the item runs becomes its failure record,
    except malformed items (rejected) and astra-eval's own bugs (raised: the stage rejects the item)."""

    async def run(item: dict) -> dict:
        check_item(item)
        try:
            return await asyncio.wait_for(run_item(item), timeout=item_timeout)
        except (Rejected, LLMUnavailable):  # an endpoint that does not answer stops the run: nothing to score
            raise
        except Exception as exc:  # noqa: BLE001 - every error of the model, endpoint or benchmark is scored
            if raised_by_harness(exc):
                raise
            return failure(item, describe(exc, item_timeout=item_timeout))

    return run


@contextmanager
def item_source(options: StageOptions, inputs_given: bool, items: Callable[[], list[dict]]):
    """Use the INPUTS given on the command line (`-` for stdin), else the benchmark's own items
    (written to a temp file so that --shard and --resume treat them like any input)."""
    if inputs_given:
        yield options
        return
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", prefix="astra-eval-items-", delete=False) as handle:
        for item in items():
            handle.write(dumps(item))
    try:
        options.inputs = (handle.name,)
        yield options
    finally:
        os.unlink(handle.name)


def run_items(command: str, options: StageOptions, run_item: RunItem, *, concurrency: int,
              item_timeout: float | None, model: str | None, seed: int | None, total: int | None = None) -> None:
    """Apply `run_item` to every input item; `run_item.close()` (if any) runs at the end, in the same loop."""

    async def run_all(stage: Stage) -> None:
        try:
            await stage.arun(guarded(run_item, item_timeout), concurrency=concurrency)
        finally:
            close = getattr(run_item, "close", None)
            if close is not None:
                await close()

    with Stage(command, options, out_kind="eval_result", model=model, seed=seed, total=total) as stage:
        asyncio.run(run_all(stage))
    if stage.counts.errors:
        raise HarnessError(f"{command}: {stage.counts.errors} items hit an error in astra-eval itself and were not "
                           f"scored (traceback above; --rejects FILE keeps them, --resume retries them)")
