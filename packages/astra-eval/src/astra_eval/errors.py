"""What an exception raised while an item runs means for that item.

tau2's own harness is the model (`tau2 run --skip-failed-samples`): an error while a task runs
(the agent's reply is empty or its tool arguments are not JSON, the endpoint refuses the request,
the benchmark's code raises) is the model's failure on that item, recorded with reward 0 and the
error. Only an exception raised by astra-eval's own code means the harness is broken: that item is
not scored (it goes to --rejects) and the command exits non-zero.
"""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

import click
from astra_core.llm.client import LLMError

PACKAGE_DIR = Path(__file__).resolve().parent
STDLIB_DIRS = tuple(str(Path(sysconfig.get_paths()[name]).resolve()) for name in ("stdlib", "platstdlib"))


class HarnessError(click.ClickException):
    """Some items hit an error in astra-eval's own code (a bug); they were not scored (exit status 1)."""


def _is_stdlib(filename: str) -> bool:
    resolved = str(Path(filename).resolve())
    return resolved.startswith(STDLIB_DIRS) and "site-packages" not in resolved


def raised_by_harness(exc: BaseException) -> bool:
    """True iff the innermost non-stdlib frame of the exception's traceback is astra-eval's own code
    (benchmark packages, HTTP clients and astra-core's LLM client are the item's side)."""
    if isinstance(exc, LLMError | TimeoutError):
        return False
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if _is_stdlib(frame.filename):
            continue
        return Path(frame.filename).resolve().is_relative_to(PACKAGE_DIR)
    return False


def describe(exc: BaseException, *, item_timeout: float | None = None) -> str:
    """The error as an eval_result records it: 'kind: message' (summary counts errors by kind)."""
    if isinstance(exc, TimeoutError) and item_timeout is not None:
        return f"timeout: item did not finish within {item_timeout:g}s"
    if isinstance(exc, LLMError):
        return f"endpoint: {exc}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:500]}"
