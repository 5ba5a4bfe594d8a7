"""The configs of `astra-qaenv export` (irrelevant-tool mixing, prompt, reward), apart from the numpy code
that applies them, so that declaring the command imports no numpy."""

from __future__ import annotations

from dataclasses import dataclass

from astra_core.config import check, knob


@dataclass
class MixingConfig:
    """Knobs of irrelevant-tool mixing (flags of `export`)."""

    mode: str = knob("bands", "Irrelevant tools: similarity bands (paper), random ones from other domains, or none.",
                     choices=("bands", "random", "none"), flag="mixing")
    k: int = knob(3, "Up to K distractors per band.", flag="per-band", minimum=0)
    high: float = knob(0.85, "High band: normalized similarity above this.", minimum=0, maximum=1)
    low: float = knob(0.4, "Low band: normalized similarity below this (in between: the medium band).",
                       minimum=0, maximum=1)
    random_min: int = knob(5, "random mode: at least this many distractors.", minimum=0)
    random_max: int = knob(9, "random mode: at most this many distractors.", minimum=0)

    def validate(self) -> None:
        check(self.low <= self.high, "low", f"{self.low} is above high {self.high} (the medium band lies between)")
        check(self.random_min <= self.random_max, "random_min", f"{self.random_min} is above random_max "
                                                                f"{self.random_max}")


@dataclass
class ExportConfig(MixingConfig):
    """Knobs of `astra-qaenv export`: the mixing of irrelevant tools, the prompt and the reward."""

    system_prompt: str | None = knob(None, "System prompt of every sample (unset: a tool-use instruction).")
    reward: str = knob("f1", "The reward the samples ask for (recall / precision: the paper's ablation).",
                       choices=("f1", "recall", "precision"))
    seed: int = knob(0, "Seed of distractor sampling and shuffling.", flag="mix-seed")
