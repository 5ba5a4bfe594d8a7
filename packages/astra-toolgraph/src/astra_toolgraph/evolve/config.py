"""Every knob of the self-evolving engine, in one documented dataclass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from astra_core.config import knob

TOOL_CHOICES = ("auto", "required", "first-required", "none")
USER_OPENINGS = ("simulated", "question")


@dataclass
class EvolveConfig:
    plans: int = knob(4, "N: plan pairs generated per domain (one stream each).")
    iterations: int = knob(3, "K: synthesis -> verification -> rollout -> verification -> reflection rounds per "
                              "stream.")
    tasks_per_plan: int = knob(4, "Candidate tasks synthesized per plan and iteration.")
    explore_turns: int = knob(2, "Tool-calling turns of the task-synthesis agent before it writes a task.")
    rollouts_per_task: int = knob(1, "Trajectories per verified task.")
    max_turns: int = knob(12, "Assistant turns (tool calls and messages) per trajectory.")
    max_user_turns: int = knob(6, "User-simulator messages per trajectory (after the first).")
    tool_choice: str = knob("auto", "The assistant's tool choice.", choices=TOOL_CHOICES)
    explore_tool_choice: str = knob("required", "The synthesis agent's tool choice while exploring.",
                                    choices=TOOL_CHOICES)
    max_tokens: int = knob(512, "Tokens per reply of the planning, synthesis, verification and reflection agents.",
                           flag="agent-max-tokens")
    assistant_max_tokens: int = knob(256, "Tokens per assistant turn.")
    user_max_tokens: int = knob(128, "Tokens per user-simulator turn.")
    user_opening: str = knob("simulated", "The trajectory's first user message: simulated (the user simulator writes it "
                                          "from its instruction) or question (the task's question, verbatim: the "
                                          "same opening in every rollout; the simulator speaks from the second "
                                          "message on).", choices=USER_OPENINGS)
    judge_tasks: bool = knob(True, "Ask the task-verification agent (else the executable pre-check alone).")
    judge_trajectories: bool = knob(True, "Ask the trajectory-verification agent (else the state checker alone).")
    verify_calls: int = knob(0, "Tool calls each verification agent (task and trajectory) may make in a disposable "
                                "episode of the domain before its verdict; 0 = one judge call over the replay "
                                "(the cheap option).")
    verify_tool_choice: str = knob("first-required", "The verification agents' tool choice while investigating.",
                                   choices=TOOL_CHOICES)
    ignore_fields: list[str] = knob([], "State path patterns the task's checker ignores (timestamps, ...).",
                                    flag="ignore-field")
    max_observation_chars: int = knob(2000, "Longer tool outputs are cut.")

    def __post_init__(self) -> None:
        for name in ("plans", "iterations", "tasks_per_plan", "rollouts_per_task", "max_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.verify_calls < 0:
            raise ValueError("verify_calls must be >= 0")
        for item in dataclasses.fields(self):  # every knob with choices (the CLI checks them too; a library caller not)
            choices = item.metadata.get("choices")
            if choices and getattr(self, item.name) not in choices:
                raise ValueError(f"{item.name} must be one of {', '.join(choices)}, got {getattr(self, item.name)!r}")

    def assistant_choice(self, turn: int) -> str:
        return choice_at(self.tool_choice, turn)

    def verifier_choice(self, turn: int) -> str:
        return choice_at(self.verify_tool_choice, turn)


def choice_at(tool_choice: str, turn: int) -> str:
    """The OpenAI tool_choice of a turn: "first-required" is "required" on turn 0, "auto" after."""
    if tool_choice == "first-required":
        return "required" if turn == 0 else "auto"
    return tool_choice
