import logging
import warnings

import pytest
from astra_core import quiet


@pytest.fixture
def fresh(monkeypatch):
    """quiet_libraries() as in a new process: not yet run, no filter on the loggers it touches."""
    monkeypatch.setattr(quiet, "_done", False)
    monkeypatch.delenv("ASTRA_VERBOSE_LIBRARIES", raising=False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    logger = logging.getLogger("DeepSpeed")
    before = list(logger.filters)
    # an earlier test of this session (any in-process stage command) may have installed the filter already
    logger.filters[:] = [f for f in before if not isinstance(f, quiet._DropMessages)]
    with warnings.catch_warnings():
        yield logger
    logger.filters[:] = before


def test_known_messages_are_dropped_and_others_kept(fresh):
    quiet.quiet_libraries()
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    fresh.addHandler(handler)
    try:
        fresh.warning("Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.")
        fresh.warning("ZeRO stage 3 offload is slow")
    finally:
        fresh.removeHandler(handler)
    assert seen == ["ZeRO stage 3 offload is slow"]


def test_filters_are_installed_once(fresh):
    quiet.quiet_libraries()
    quiet.quiet_libraries()
    assert sum(isinstance(f, quiet._DropMessages) for f in fresh.filters) == 1


def test_the_deprecation_warning_is_dropped_but_not_other_future_warnings(fresh):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.quiet_libraries()  # its filter goes in front of "always"
        warnings.warn("torch.distributed.nn.functional.all_to_all_single is deprecated, use X", FutureWarning,
                      stacklevel=1)
        warnings.warn("something else is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else is deprecated"]


def test_progress_bars_of_model_loads_are_off(fresh):
    import os

    quiet.quiet_libraries()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"


def test_verbose_keeps_everything(fresh, monkeypatch):
    monkeypatch.setenv("ASTRA_VERBOSE_LIBRARIES", "1")
    quiet.quiet_libraries()
    assert not any(isinstance(f, quiet._DropMessages) for f in fresh.filters)
