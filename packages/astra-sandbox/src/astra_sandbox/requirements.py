"""Declared requirements of an environment -> the host files that make exactly those importable.

Inside the jail only the standard library is importable. An environment that declares
`requirements` (distribution or module names, version specifiers ignored) gets each one's
top-level packages bound read-only from the host's site-packages; everything else stays hidden.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re

from astra_sandbox.errors import SandboxError
from astra_sandbox.jail import host_site_dirs

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_name(requirement: str) -> str:
    match = _NAME.match(requirement)
    if not match:
        raise SandboxError(f"cannot read requirement {requirement!r}")
    return match.group(1)


def _distribution_entries(name: str, site_dirs: tuple[str, ...]) -> tuple[int, list[str]] | None:
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    base = os.path.realpath(str(distribution.locate_file("")))
    if base not in site_dirs:
        return None
    entries = set()
    for file in distribution.files or ():
        top = file.parts[0]
        if top in ("..", "__pycache__") or top.endswith((".dist-info", ".egg-info", ".pth")):
            continue
        entries.add(top)
    return site_dirs.index(base), sorted(entries)


def _module_entry(name: str, site_dirs: tuple[str, ...]) -> tuple[int, list[str]] | None:
    try:
        spec = importlib.util.find_spec(name.replace("-", "_"))
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    location = spec.submodule_search_locations[0] if spec.submodule_search_locations else spec.origin
    location = os.path.realpath(location)
    parent = os.path.dirname(location)
    if parent not in site_dirs:
        return None
    return site_dirs.index(parent), [os.path.basename(location)]


def resolve_requirements(requirements: list[str]) -> dict:
    """The `site` part of an open request: which host site-packages entries to bind, by index."""
    if not requirements:
        return {}
    return _resolve(tuple(requirements))


@functools.lru_cache(maxsize=256)
def _resolve(requirements: tuple[str, ...]) -> dict:
    site_dirs = host_site_dirs()
    site: list[list] = []
    for requirement in requirements:
        name = requirement_name(requirement)
        found = _distribution_entries(name, site_dirs) or _module_entry(name, site_dirs)
        if found is None:
            raise SandboxError(f"requirement {name!r} is not installed in the host's site-packages "
                               f"({', '.join(site_dirs) or 'none found'}); install it there (pip install {name})")
        index, entries = found
        site += [[index, entry] for entry in entries if [index, entry] not in site]
    return {"site": site, "site_dirs": list(site_dirs)}
