"""Per-step metrics: accelerate trackers (TensorBoard by default) and OUTPUT_DIR/metrics.jsonl,
which `astra-grpo plot` reads."""

from __future__ import annotations

import json
import math
import os
import sys
import uuid
from pathlib import Path

from astra_core.extras import require

from astra_grpo.config import TrainConfig, to_dict

METRICS_FILE = "metrics.jsonl"
WANDB_RUN_FILE = "wandb_run_id"
# Trackers whose library is an extra of ours (accelerate would silently drop a tracker that is not installed).
TRACKER_EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb"}
TRACKER_HINTS = {"wandb": "WANDB_MODE=offline: a local run, no account"}


class TrackerError(RuntimeError):
    """A tracker `report_to` asks for did not start (wandb without credentials, say)."""


def trackers(config: TrainConfig) -> list[str]:
    """The accelerate trackers `report_to` asks for ("none" and empty names dropped); MissingExtra naming the
    extra to install when one of ours is absent."""
    wanted = [t for t in config.report_to if t and t != "none"]
    for tracker in wanted:
        if tracker in TRACKER_EXTRAS:
            require(tracker, extra=f"astra-grpo[{TRACKER_EXTRAS[tracker]}]",
                    needed_by=f"astra-grpo --report-to {tracker} (--report-to none: no tracker)")
    return wanted


def start_trackers(accelerator, config: TrainConfig) -> None:
    """Start the accelerate trackers on the main process. The trainers call this before they load the
    model, so that a tracker that cannot start fails in seconds, not after minutes of loading."""
    if not accelerator.log_with:
        return
    wanted = trackers(config)
    kwargs = {"wandb": _wandb_run(config)} if "wandb" in wanted and accelerator.is_main_process else {}
    try:
        accelerator.init_trackers(config.run_name, config=_flat(config), init_kwargs=kwargs)
    except Exception as exc:  # noqa: BLE001 - any tracker's failure to start, reported in one line
        hints = "; ".join(TRACKER_HINTS[name] for name in wanted if name in TRACKER_HINTS)
        raise TrackerError(f"--report-to {','.join(wanted)}: the tracker did not start: {exc} "
                           f"({hints + '; ' if hints else ''}--report-to none: no tracker)") from exc


def _wandb_run(config: TrainConfig) -> dict:
    """The wandb run of this output directory: a `--resume`d run goes on logging to the run it continues
    (its id is kept in OUTPUT_DIR/wandb_run_id), a fresh one starts a new run. WANDB_RUN_ID, if set, decides."""
    if os.environ.get("WANDB_RUN_ID"):
        return {}
    path = Path(config.output_dir) / WANDB_RUN_FILE
    run_id = path.read_text().strip() if config.resume and path.exists() else uuid.uuid4().hex[:8]
    path.write_text(run_id + "\n")
    return {"id": run_id, "resume": "allow"}


def _flat(config: TrainConfig) -> dict:
    """Tracker hyper-parameters: scalars only (lists joined, mappings as JSON)."""
    out = {}
    for key, value in to_dict(config).items():
        if isinstance(value, list):
            value = ",".join(map(str, value))
        elif isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        out[key] = "" if value is None else value
    return out


class Metrics:
    """Logs a step's values to OUTPUT_DIR/metrics.jsonl, stderr and the trackers (started by `start_trackers`)."""

    def __init__(self, accelerator, config: TrainConfig, resume_step: int | None = None):
        self.accelerator = accelerator
        self.path = Path(config.output_dir) / METRICS_FILE
        self.logging_steps = config.logging_steps
        self.trackers = bool(accelerator.log_with)
        if accelerator.is_main_process:
            if resume_step is None:
                self.path.write_text("")
            else:
                self._truncate_after(resume_step)

    def _truncate_after(self, step: int) -> None:
        """Steps logged after the state we resume from are replayed: drop their old lines."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def log(self, step: int, values: dict[str, float], *, final: bool = False) -> None:
        if step % self.logging_steps and not final:
            return
        clean = {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}
        if self.trackers:
            self.accelerator.log(clean, step=step)
        if self.accelerator.is_main_process:
            with self.path.open("a") as handle:
                handle.write(json.dumps({"step": step, **clean}) + "\n")
            shown = " ".join(f"{k}={clean[k]:.4g}" for k in self.headline if k in clean)
            print(f"step {step}: {shown}", file=sys.stderr, flush=True)

    headline = ("loss", "reward/mean", "batch/reward_mean", "rollout/readable_calls_mean", "turns/mean",
                "valid_fraction", "grad_norm", "lr", "tokens_per_s")

    def close(self) -> None:
        if self.trackers:
            self.accelerator.end_training()
