"""Hypothesis profiles for the whole workspace, and how `make test` shares the tests among its workers.

`make test` (CI) runs the property tests derandomized: the same examples every run, so a red build means the
code changed, not the dice. `make test-slow` explores: ten times the examples, fresh ones each run (a new
failure found there becomes an explicit regression test).
"""

import importlib
import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# `make test` runs the suite on pytest-xdist workers (scripts/test: -n 2 --dist loadgroup), which share it out test by
# test, except tests of one xdist_group, which run on one worker. Groups are added here so that each fixture wider
# than a test is still built once per run, as in a run of one process:
# - a test using one of these session fixtures joins its group: a local Ray (one per worker would take the machine's
#   CPUs twice; `ray_cluster`'s `ray stop` ends every Ray of this user on the machine, another worker's too);
# - otherwise a test using a module- or class-scoped fixture runs on the worker of the rest of its module (a
#   wheelhouse built, a tokenizer trained, a server started once per module, not once per worker).
SHARED_BY_ONE_WORKER = {"local_ray": "ray", "ray_cluster": "ray"}


def _xdist_group(item) -> str | None:
    names = getattr(item, "fixturenames", ())
    groups = {SHARED_BY_ONE_WORKER[name] for name in names if name in SHARED_BY_ONE_WORKER}
    if groups:
        (group,) = groups  # one group per test: a test needing two would have to join both
        return group
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(d.scope in ("module", "class", "package") for defs in definitions.values() for d in defs):
        return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups into the tests' ids
def pytest_collection_modifyitems(items):
    groups = {}
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker("property")
        groups[item] = _xdist_group(item)
    # A module some of whose tests join a session fixture's group runs its module-wide fixtures in that group too.
    joined = {item.nodeid.split("::", 1)[0]: group for item, group in groups.items() if group in SHARED_BY_ONE_WORKER.values()}
    for item, group in groups.items():
        group = joined.get(group, group)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


# Summary lines that packages' conftest.py print at the end of a run (the sandbox's security tally, the template
# matrix's coverage). Under pytest-xdist their workers hand what they counted to the controller, keyed by the
# "module:function" (a tests helper module on the pythonpath) that makes the line from every worker's part.
_FROM_WORKERS: dict[str, list] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    for key, part in getattr(node, "workeroutput", {}).get("astra_summaries", {}).items():
        _FROM_WORKERS.setdefault(key, []).append(part)


def pytest_terminal_summary(terminalreporter):
    for key, parts in sorted(_FROM_WORKERS.items()):
        module, function = key.split(":")
        line = getattr(importlib.import_module(module), function)(parts)
        if line:
            terminalreporter.write_line(line)
