"""docs/model-families.md is generated from code (scripts/model_families_doc.py): every tool-capable chat template
of the installed trl, how its replies are read, its stop tokens and layout notes."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_docs_model_families_md_is_generated_from_the_code():
    fresh = subprocess.run([sys.executable, str(ROOT / "scripts" / "model_families_doc.py")], capture_output=True,
                           text=True, check=True, timeout=600).stdout
    assert (ROOT / "docs" / "model-families.md").read_text() == fresh, \
        "docs/model-families.md is stale: run `.venv/bin/python scripts/model_families_doc.py > docs/model-families.md`"
    from template_families import tool_capable_templates

    assert all(f"`{name}.jinja`" in fresh for name in tool_capable_templates())
