"""Running eval items through a `Stage`: concurrency limit, per-item timeout, resume and shards.

Every benchmark adapter provides `async run_item(item) -> eval_result`. The runner applies it to
item records (from files or generated from the benchmark's selection options) and writes one
eval_result per item. An item that times out or whose endpoint fails for good is written as a
failure with its error (never dropped); a bug in an adapter still lands in --rejects.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import contextmanager

from astra_core.jsonl import dumps
from astra_core.llm.client import LLMError
from astra_core.stage import Stage, StageOptions

from astra_eval.results import failure

RunItem = Callable[[dict], Awaitable[dict]]


def guarded(run_item: RunItem, item_timeout: float | None) -> RunItem:
    """`run_item` with a wall-clock limit; timeouts and endpoint failures become failure records."""

    async def run(item: dict) -> dict:
        try:
            return await asyncio.wait_for(run_item(item), timeout=item_timeout)
        except TimeoutError:
            return failure(item, f"timeout: item did not finish within {item_timeout:g}s")
        except LLMError as exc:
            return failure(item, f"endpoint: {exc}")

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
