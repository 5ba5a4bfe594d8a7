"""Print one BFCL entry's first user message, ground truth and held-out functions (runs in .venv-bfcl)."""

import json
import sys

from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

category, entry_id = sys.argv[1], sys.argv[2]
entry = next(e for e in load_dataset_entry(category) if e["id"] == entry_id)
truth = next(a for a in load_ground_truth_entry(category) if a["id"] == entry_id)
held = entry.get("missed_function", {})
turn = next(iter(held), None)
print(json.dumps({"first_message": entry["question"][0][0]["content"], "ground_truth": truth["ground_truth"],
                  "held_out_turn": turn, "held_out": [f["name"] for f in held.get(turn, [])] if turn else []}))
