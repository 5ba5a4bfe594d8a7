"""Known-harmless library noise, silenced at its source: once per process, by logger and message.

Every `astra-*` command calls `quiet_libraries()` before it loads a library. Each entry names the
library, where its message comes from and why it says nothing a user can act on; anything else a
library logs still shows. ASTRA_VERBOSE_LIBRARIES=1 keeps all of it.

- DeepSpeed's "Setting accelerator to CPU" (logger `DeepSpeed`, on stdout): a CPU run is what was asked for.
- transformers' "Loading weights" bars (tqdm, one per model load): local loads take a second and the
  bars fill the log (HF_HUB_DISABLE_PROGRESS_BARS; downloads do not happen here, models are local paths).
- torch's FutureWarning on `torch.distributed.nn.functional.all_to_all_single` (Ulysses context
  parallelism): the autograd-aware collective still works, its replacement is not autograd-aware.
- tau2's "No .env file found" (loguru, module `tau2.utils.utils`): the toolkit passes endpoints explicitly.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

# (logger name, start of the message) of library log records that are dropped.
SILENCED_LOGS = (
    ("DeepSpeed", "Setting accelerator to CPU"),
)
# (category, regex on the message) of Python warnings that are dropped.
SILENCED_WARNINGS = (
    (FutureWarning, r"torch\.distributed\.nn\.functional\.all_to_all_single is deprecated"),
)
SILENCED_LOGURU_MODULES = ("tau2.utils.utils",)

_done = False


class _DropMessages(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def _silence_logs() -> None:
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, prefix in SILENCED_LOGS:
        by_logger[name] = (*by_logger.get(name, ()), prefix)
    for name, prefixes in by_logger.items():
        # A filter on the named logger stays when the library later configures that logger (DeepSpeed sets
        # its level and handler at import, on the same logging.getLogger(name) object).
        logging.getLogger(name).addFilter(_DropMessages(prefixes))


def _silence_progress_bars() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when huggingface_hub is imported
    if "transformers.utils.logging" in sys.modules:  # already imported: its switch was read from the env
        sys.modules["transformers.utils.logging"].disable_progress_bar()


def _silence_loguru() -> None:
    if "loguru" not in sys.modules and not _importable("loguru"):
        return
    from loguru import logger

    for module in SILENCED_LOGURU_MODULES:
        logger.disable(module)


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def quiet_libraries() -> None:
    """Silence the known-harmless messages above (idempotent: the filters are installed once)."""
    global _done
    if _done or os.environ.get("ASTRA_VERBOSE_LIBRARIES") == "1":
        return
    _done = True
    _silence_logs()
    for category, message in SILENCED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    _silence_progress_bars()
    _silence_loguru()
