"""The configs of astra-toolgraph's walk, emulator and rollout stages, apart from their heavy modules
(numpy, jsonschema, the MCP client) so that declaring the commands imports none of those."""

from __future__ import annotations

from dataclasses import dataclass

from astra_core.config import check_knobs, knob

from astra_toolgraph import prompts

TOOL_CHOICES = ("auto", "required", "first-required", "none")


@dataclass
class WalkConfig:
    walks: int = knob(32, "Walks started per graph (before short ones are dropped and duplicates merged).",
                       minimum=1)
    min_length: int = knob(2, "Fewest tools in a kept walk.", minimum=1)
    max_length: int = knob(5, "Most tools in a walk.", minimum=1)
    acyclic: bool = knob(False, "Never revisit a tool within a walk.")
    seed: int = knob(0, "Seed of the walks.")
    start: str = knob("uniform", "Start tool: uniform over tools with successors, or weighted by out-weight.",
                      choices=("uniform", "weighted"))
    dedup: bool = knob(True, "Keep each distinct walk once (with how often it was drawn).")

    def __post_init__(self) -> None:
        check_knobs(self)
        if self.min_length > self.max_length:
            raise ValueError(f"need min_length <= max_length, got {self.min_length}..{self.max_length}")


@dataclass
class EmulatorConfig:
    failure_rate: float = knob(0.2, "Emulated calls that fail (timeout or unreachable); the paper uses 20%.",
                               flag="emulator-failure-rate", minimum=0, maximum=1)
    seed: int = knob(0, "Seed of the emulator's failure draws.", flag="emulator-seed")
    max_tokens: int | None = knob(None, "Cap on an emulated output's tokens (unset: the client's default).",
                                  flag="emulator-max-tokens", minimum=1)

    def __post_init__(self) -> None:
        check_knobs(self)


@dataclass
class RolloutConfig:
    max_turns: int = knob(8, "Assistant turns before the episode is cut.", minimum=1)
    tool_choice: str = knob("auto", "OpenAI tool_choice; first-required obliges a call on the first turn only.",
                            choices=TOOL_CHOICES)
    parallel_calls: bool = knob(True, "Run the calls of one turn concurrently.")
    samples: int = knob(1, "Trajectories per task.", minimum=1)
    system_prompt: str = knob(prompts.AGENT_SYSTEM, "The agent's system message.")
    emulate_live: bool = knob(False, "Emulate deployed servers too (no real calls).")
    max_observation_chars: int = knob(4000, "Longer tool outputs are cut (the policy's context is finite).",
                                       minimum=1)
    emulator: EmulatorConfig | None = None  # (no flag: a command sets it from its --emulator-... knobs)

    def __post_init__(self) -> None:
        check_knobs(self)
        self.emulator = self.emulator or EmulatorConfig()

    def choice_for(self, turn: int) -> str:
        if self.tool_choice == "first-required":
            return "required" if turn == 0 else "auto"
        return self.tool_choice
