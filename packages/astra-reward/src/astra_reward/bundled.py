"""Sample records shipped inside the package (used by the demo and the tests).

    rollouts.jsonl      rollouts of two RL samples (no `job`: join with samples.jsonl)
    samples.jsonl       the rl_sample records they were played from (`job` for the F1 reward)
    states.jsonl        final/expected environment states for the state verifier
    trajectories.jsonl  trajectory records for judge-trajectory
    qa_instances.jsonl  qa_instance records for judge-qa
    tasks.jsonl         task records for judge-task, with servers.jsonl (their tool servers)
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path


def data_path(name: str = "") -> Path:
    """Path of a bundled data file (or of the data directory when `name` is empty)."""
    with as_file(files("astra_reward") / "data" / name) as path:
        return Path(path)
