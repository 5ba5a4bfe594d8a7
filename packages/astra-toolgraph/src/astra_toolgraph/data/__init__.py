"""Bundled sample tool documents (one per supported format) and their `normalize` sources."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path


def data_dir() -> Path:
    return Path(str(files("astra_toolgraph") / "data"))


def sample_sources() -> list[dict]:
    """The bundled sources (sources.jsonl) with their `path`s made absolute."""
    base = data_dir()
    sources = []
    for line in (base / "sources.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            source = json.loads(line)
            if "path" in source:
                source["path"] = str(base / source["path"])
            sources.append(source)
    return sources


def sample_domain() -> dict:
    """The bundled shop domain as an `environment` record (its code runs in an astra-sandbox session),
    with `description` and `example_tasks` for the self-evolving engine's planner."""
    from astra_core.records import new_record

    spec = json.loads((data_dir() / "evolve" / "shop_domain.json").read_text(encoding="utf-8"))
    code = (data_dir() / "evolve" / spec.pop("code_file")).read_text(encoding="utf-8")
    return new_record(spec.pop("id"), code=code, **spec)
