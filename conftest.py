"""Hypothesis profiles for the whole workspace.

`make test` (CI) runs the property tests derandomized: the same examples every run, so a red build means the
code changed, not the dice. `make test-slow` explores: ten times the examples, fresh ones each run (a new
failure found there becomes an explicit regression test).
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(items):
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker("property")
