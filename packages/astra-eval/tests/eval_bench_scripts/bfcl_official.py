"""Run BFCL entries through bfcl-eval's own `bfcl generate` and `bfcl evaluate` (runs in .venv-bfcl).

argv: WORK MODEL IDS_JSON. The model is a bfcl-eval registry name; its handler reaches the endpoint in
$OPENAI_BASE_URL (API handlers) or $REMOTE_OPENAI_BASE_URL (local-model handlers, with --skip-server-setup).
Both commands run in this one process through bfcl-eval's typer CLI (importing its model registry once),
with BFCL_PROJECT_ROOT=WORK so results, scores and the id file stay there. Prints {id: valid}.
"""

import json
import os
import sys
from pathlib import Path

work, model, ids = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
os.environ["BFCL_PROJECT_ROOT"] = str(work)
work.mkdir(parents=True, exist_ok=True)
by_category: dict[str, list[str]] = {}
for entry_id in ids:
    by_category.setdefault(entry_id.rsplit("_", 1)[0], []).append(entry_id)
(work / "test_case_ids_to_generate.json").write_text(json.dumps(by_category))

from bfcl_eval.__main__ import cli  # noqa: E402

generate = ["generate", "--model", model, "--run-ids", "--num-threads", "8", "--allow-overwrite"]
if os.environ.get("REMOTE_OPENAI_BASE_URL"):
    generate.append("--skip-server-setup")
cli(generate, standalone_mode=False)
cli(["evaluate", "--model", model, "--test-category", ",".join(by_category), "--partial-eval"],
    standalone_mode=False)

verdicts = {entry_id: True for entry_id in ids}
for score_file in (work / "score").rglob("*_score.json"):
    for line in score_file.read_text().splitlines()[1:]:
        if line.strip():
            verdicts[json.loads(line)["id"]] = False
print(json.dumps(verdicts))
