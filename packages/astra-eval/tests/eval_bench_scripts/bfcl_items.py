"""Print BFCL entries for a scripted model (runs in .venv-bfcl): argv[1] limit per category, argv[2:] categories.

{"entries": {id: {"category", "first_message", "user_turns", "ground_truth"}}}: user_turns is each turn's
user message (None at a held-out turn, whose message the handler writes).
"""

import json
import sys

from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

limit, categories = int(sys.argv[1]), sys.argv[2:]
entries = {}
for category in categories:
    truth = {answer["id"]: answer["ground_truth"] for answer in load_ground_truth_entry(category)}
    for entry in load_dataset_entry(category)[:limit]:
        user_turns = [turn[-1]["content"] if turn else None for turn in entry["question"]]
        entries[entry["id"]] = {"category": category, "first_message": user_turns[0], "user_turns": user_turns,
                                "ground_truth": truth[entry["id"]]}
print(json.dumps({"entries": entries}))
