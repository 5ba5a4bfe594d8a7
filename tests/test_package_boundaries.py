"""The joins between packages: no package imports another's private module or a private name, nor a private
module of a third-party library (they move without notice); docs/cli.md is generated from the commands."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted((ROOT / "packages").glob("astra-*/src/astra_*"))
# Private modules of third-party libraries we still use, each with why there is no public way.
ALLOWED_PRIVATE = {
    "transformers.modeling_flash_attention_utils._flash_attention_forward":
        "the FlashAttention kernel transformers' attention interface dispatches to; context parallelism wraps it",
}


def imports(package: Path):
    """(file, line, module, name) of every `import` and `from ... import` in a package's sources."""
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    yield path, node.lineno, node.module, alias.name
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, node.lineno, alias.name, None


def is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def test_no_package_imports_a_private_module_or_name_of_another():
    found = []
    for package in PACKAGES:
        own = package.name
        for path, line, module, name in imports(package):
            top = module.split(".")[0]
            if top == own or top == "__future__":
                continue
            parts = module.split(".") + ([name] if name else [])
            if any(is_private(part) for part in parts) and ".".join(parts) not in ALLOWED_PRIVATE:
                found.append(f"{path.relative_to(ROOT)}:{line}: {'.'.join(parts)}")
    assert not found, "private imports across package boundaries:\n" + "\n".join(found)


def test_siblings_are_used_through_their_public_api():
    """`from astra_x.mod import name` of a sibling package: `name` must be in that module's __all__ when it has
    one (module-level names of a module without __all__ count as public)."""
    import importlib

    found = []
    for package in PACKAGES:
        for path, line, module, name in imports(package):
            top = module.split(".")[0]
            if not top.startswith("astra_") or top == package.name or name is None or name == "*":
                continue
            try:
                target = importlib.import_module(module)
            except ImportError:
                continue  # an optional extra that is not installed here
            exported = getattr(target, "__all__", None)
            if exported is not None and name not in exported and not hasattr(importlib.util.find_spec(module),
                                                                               "submodule_search_locations"):
                found.append(f"{path.relative_to(ROOT)}:{line}: {module}.{name} is not in {module}.__all__")
    assert not found, "\n".join(found)


def test_docs_cli_md_is_generated_from_the_commands():
    fresh = subprocess.run([str(Path(sys.executable).parent / "astra-core"), "cli-doc"], capture_output=True,
                           text=True, check=True).stdout
    assert (ROOT / "docs" / "cli.md").read_text() == fresh, "docs/cli.md is stale: run `astra-core cli-doc > docs/cli.md`"


def test_one_name_per_setting():
    """The names issue 18 found twice for one setting: only the kept one remains in the commands."""
    text = (ROOT / "docs" / "cli.md").read_text()
    for retired in ("--unsafe-no-jail", "--call-timeout ", "ASTRA_EVAL_USER_"):
        assert retired not in text, f"{retired.strip()} is the retired name of a setting"
