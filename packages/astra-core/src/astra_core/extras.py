"""Optional dependencies that live in a package's extras: import them, or say in one line what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtra", "require"]


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it.

    The commands' `report_errors` shows it as one line, without a traceback."""


def require(module: str, *, extra: str, needed_by: str) -> ModuleType:
    """Import `module`, or raise MissingExtra: "<needed_by> needs <module>: pip install '<extra>'".

    `extra` is the requirement to install, e.g. "astra-toolgraph[plots]"; `needed_by` says what needs it,
    e.g. "astra-toolgraph stats --plots". Only the absence of `module` itself is translated: an import
    error raised inside an installed module is a real bug and propagates as it is."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise
        top = module.split(".")[0]
        raise MissingExtra(f"{needed_by} needs {top}: pip install '{extra}'") from None
