"""astra_core.extras.require: an absent optional module is one MissingExtra line naming the extra; a module that is
installed is returned, and an import error raised inside it is not disguised as a missing extra."""

import json
import sys

import pytest
from astra_core.extras import MissingExtra, require


def test_an_installed_module_is_returned():
    assert require("json", extra="x[y]", needed_by="z") is json


def test_an_absent_module_names_the_extra_to_install():
    with pytest.raises(MissingExtra) as caught:
        require("astra_no_such_module.sub", extra="astra-demo[plots]", needed_by="astra-demo stats --plots")
    assert str(caught.value) == "astra-demo stats --plots needs astra_no_such_module: pip install 'astra-demo[plots]'"
    assert isinstance(caught.value, ImportError)


def test_a_missing_import_inside_an_installed_module_propagates(tmp_path, monkeypatch):
    (tmp_path / "astra_broken_module.py").write_text("import astra_missing_dependency_of_it\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as caught:
        require("astra_broken_module", extra="x[y]", needed_by="z")
    assert not isinstance(caught.value, MissingExtra) and caught.value.name == "astra_missing_dependency_of_it"
    sys.modules.pop("astra_broken_module", None)
