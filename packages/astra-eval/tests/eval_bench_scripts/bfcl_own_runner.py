"""Score astra-eval's BFCL records with bfcl-eval's own evaluation runner (runs in .venv-bfcl).

Reads eval_result JSONL (argv[1]); for each category rebuilds BFCL's result entries
{"id", "result": per-turn, per-step model responses} and calls bfcl-eval's `multi_turn_runner`
(the function behind `bfcl evaluate`), which writes its score file into argv[2]. Prints
{category: {"accuracy": ..., "failed": [ids]}} as read back from BFCL's score files.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENAI_API_KEY", "unused")  # the handler builds an OpenAI client it never calls

# bfcl-eval's model registry imports every vendor SDK (~40 s on a busy machine) and multi_turn_runner never
# reads it: stand in an empty registry so the scoring code below is bfcl-eval's own, minus that wait.
import types  # noqa: E402

sys.modules["bfcl_eval.constants.model_config"] = types.SimpleNamespace(MODEL_CONFIG_MAPPING={})

from bfcl_eval.eval_checker.eval_runner import multi_turn_runner  # noqa: E402
from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler  # noqa: E402
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry  # noqa: E402

records = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
score_dir = Path(sys.argv[2])
handler = OpenAICompletionsHandler(model_name="astra-replay", temperature=0.0, registry_name="astra-replay-FC",
                                   is_fc_model=True)
report = {}
for category in sorted({r["category"] for r in records}):
    mine = {r["item_id"]: r for r in records if r["category"] == category}
    prompts = [e for e in load_dataset_entry(category) if e["id"] in mine]
    answers = [a for a in load_ground_truth_entry(category) if a["id"] in mine]
    results = [{"id": e["id"], "result": mine[e["id"]]["details"]["model_result"]} for e in prompts]
    accuracy, total = multi_turn_runner(handler, results, prompts, answers, "astra-replay", category, score_dir)
    score_file = next(score_dir.rglob(f"*_{category}_score.json"))
    lines = [json.loads(line) for line in score_file.read_text().splitlines() if line.strip()]
    report[category] = {"accuracy": accuracy, "total": total, "failed": sorted(x["id"] for x in lines[1:])}
print(json.dumps(report))
