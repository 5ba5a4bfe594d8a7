"""Per-step metrics: accelerate trackers (TensorBoard by default) and OUTPUT_DIR/metrics.jsonl,
which `astra-grpo plot` reads."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from astra_core.extras import require

from astra_grpo.config import TrainConfig, to_dict

METRICS_FILE = "metrics.jsonl"
# Trackers whose library is an extra of ours (accelerate would silently drop a tracker that is not installed).
TRACKER_EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb"}


def trackers(config: TrainConfig) -> list[str]:
    """The accelerate trackers `report_to` asks for ("none" and empty names dropped); MissingExtra naming the
    extra to install when one of ours is absent."""
    wanted = [t for t in config.report_to if t and t != "none"]
    for tracker in wanted:
        if tracker in TRACKER_EXTRAS:
            require(tracker, extra=f"astra-grpo[{TRACKER_EXTRAS[tracker]}]",
                    needed_by=f"astra-grpo --report-to {tracker} (--report-to none: no tracker)")
    return wanted


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
        if self.trackers:
            accelerator.init_trackers(config.run_name, config=_flat(config))

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

    headline = ("loss", "reward/mean", "batch/reward_mean", "turns/mean", "valid_fraction", "grad_norm", "lr",
                "tokens_per_s")

    def close(self) -> None:
        if self.trackers:
            self.accelerator.end_training()
