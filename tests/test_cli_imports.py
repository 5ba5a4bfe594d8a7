"""Start-up is a behaviour: `--help` of every command and subcommand imports none of torch, transformers, numpy, ray and openenv
(each costs a second or more and hundreds of MB). Each command's tree is walked in a fresh interpreter, through
its console-script entry point, checking the loaded modules after every `--help`, so the first help that pulls a
heavy library is the one named (the timing itself is `benchmarks/cli_startup.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

HEAVY = ("torch", "transformers", "numpy", "ray", "openenv")
COMMANDS = sorted(ep.name for ep in entry_points(group="console_scripts") if ep.name.startswith("astra-"))

WALK = """
import json, sys
from importlib.metadata import entry_points

import click
from click.testing import CliRunner

HEAVY = {heavy!r}
[entry] = [ep for ep in entry_points(group="console_scripts") if ep.name == {command!r}]
heavy_at_start = [m for m in HEAVY if m in sys.modules]
main = entry.load()
runner = CliRunner()


def paths(group, prefix):
    yield prefix
    if isinstance(group, click.Group):
        for name in sorted(group.list_commands(None)):
            yield from paths(group.get_command(None, name), prefix + [name])


found = []
for path in paths(main, []):
    result = runner.invoke(main, path + ["--help"])
    loaded = [m for m in HEAVY if m in sys.modules]
    found.append({{"path": path, "exit": result.exit_code, "loaded": loaded,
                   "error": repr(result.exception) if result.exit_code else None}})
    if loaded:
        break
print(json.dumps({{"heavy_at_start": heavy_at_start, "helps": found}}))
"""


def test_every_console_script_is_walked():
    assert {"astra-core", "astra-sandbox", "astra-reward", "astra-toolgraph", "astra-qaenv", "astra-grpo",
            "astra-eval"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_imports_no_heavy_library(command):
    script = WALK.format(heavy=HEAVY, command=command)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300)
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["heavy_at_start"] == []
    helps = report["helps"]
    assert len(helps) > 1 or command == "astra-core", helps  # every command here has subcommands
    for help_ in helps:
        assert help_["exit"] == 0, f"{command} {' '.join(help_['path'])} --help failed: {help_['error']}"
        assert help_["loaded"] == [], (f"{command} {' '.join(help_['path'])} --help imported "
                                       f"{', '.join(help_['loaded'])}: import it where it is used, not at module load")
