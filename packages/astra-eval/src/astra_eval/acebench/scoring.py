"""ACEBench's agent scores: end-to-end accuracy (final state) and process accuracy (milestones).

End-to-end, per task: the number of class snapshots must equal the number of ground-truth
entries; then each ground-truth entry is compared with the snapshot of the same class name
(every saved attribute the snapshot has must be in the ground truth; a dict-valued attribute
matches when each expected key is present with an equal value; other values must be equal).
A ground-truth entry whose class name has no snapshot is not compared (ACEBench's evaluator
skips it: several ground truths spell the reminder app "ReminderAPI").

Process, per task: 1.0 when end-to-end correct; otherwise the share of milestone strings found, in
order, in the model's list of execution messages (exact match after strip); with alternative
milestone lists the best one counts. Accuracies are means over tasks, rounded to 3 decimals.
"""

from __future__ import annotations


def _class_errors(snapshot: dict, expected: dict) -> list[str]:
    name, expected_attrs = next(iter(expected.items()))
    errors = []
    for attr, value in next(iter(snapshot.values())).items():
        if attr not in expected_attrs:
            errors.append(f"{name}.{attr} missing in the ground truth")
            continue
        want = expected_attrs[attr]
        if isinstance(want, dict):
            for key, item in want.items():
                if key not in value or value[key] != item:
                    errors.append(f"{name}.{attr}[{key!r}]: expected {item!r}, got {value.get(key, '(missing)')!r}")
        elif want != value:
            errors.append(f"{name}.{attr}: expected {want!r}, got {value!r}")
    return errors


def end_to_end(result: list[dict], ground_truth: list[dict] | dict) -> tuple[bool, list[str]]:
    """(correct, reasons) for one task's final snapshots against its ground truth."""
    expected_list = ground_truth if isinstance(ground_truth, list) else [ground_truth]
    if len(expected_list) != len(result):
        return False, [f"wrong number of classes: {len(result)} snapshots, {len(expected_list)} expected"]
    errors: list[str] = []
    for expected in expected_list:
        snapshot = next((s for s in result if set(s) == set(expected)), None)
        if snapshot is not None:
            errors += _class_errors(snapshot, expected)
    return not errors, errors


def _in_order_share(process: list[str], milestones: list[str]) -> float:
    if not milestones:
        return 1.0
    found, position = 0, 0
    for stone in milestones:
        while position < len(process):
            position += 1
            if process[position - 1].strip() == stone.strip():
                found += 1
                break
    return found / len(milestones)


def process_accuracy(process: list[str], milestones: list, *, correct: bool) -> float:
    if correct:
        return 1.0
    if milestones and isinstance(milestones[0], list):
        return max(round(_in_order_share(process, option), 3) for option in milestones)
    return _in_order_share(process, milestones)  # ACEBench rounds only the best of alternatives
