"""Re-score astra-eval's tau2 records with tau2's own `tau2 evaluate-trajs` tool (runs in .venv-tau2).

`tau2_rewards(records, work)` writes one tau2 Results file per domain under `work/in`, runs tau2's
evaluate_trajectories on them (the function behind `tau2 evaluate-trajs PATH -o DIR`) and returns
{domain: {task_id/trial: recomputed reward}} read from the files that tool wrote.
As a script: records from argv[1], work directory argv[2]; prints that JSON.
"""

import json
import sys
from pathlib import Path

from astra_eval.tau2 import to_results
from tau2.data_model.simulation import Results
from tau2.scripts.evaluate_trajectories import evaluate_trajectories


def tau2_rewards(records: list[dict], work: Path) -> dict:
    (work / "in").mkdir(parents=True, exist_ok=True)
    for domain in sorted({r["category"] for r in records}):
        results = to_results([r for r in records if r["category"] == domain], domain=domain)
        (work / "in" / f"{domain}.json").write_text(results.model_dump_json())
    evaluate_trajectories([str(work / "in")], output_dir=str(work / "out"))
    report = {}
    for path in sorted((work / "out").glob("*.json")):
        results = Results.model_validate_json(path.read_text())
        domain = results.info.environment_info.domain_name
        report[domain] = {f"{s.task_id}/{s.trial}": s.reward_info.reward for s in results.simulations}
    return report


if __name__ == "__main__":
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
    print(json.dumps(tau2_rewards(rows, Path(sys.argv[2]))))
