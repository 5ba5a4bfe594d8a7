"""Every knob of the self-evolving engine, in one documented dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvolveConfig:
    plans: int = 4  # N: plan pairs generated per domain (streams)
    iterations: int = 3  # K: synthesis -> verification -> rollout -> verification -> reflection rounds per stream
    tasks_per_plan: int = 4  # candidate tasks synthesized per plan and iteration
    explore_turns: int = 2  # tool-calling turns of the task-synthesis agent before it writes a task
    rollouts_per_task: int = 1  # trajectories per verified task
    max_turns: int = 12  # assistant turns (tool calls and messages) per trajectory
    max_user_turns: int = 6  # user-simulator messages per trajectory (after the first)
    tool_choice: str = "auto"  # the assistant's tool choice: auto | required | first-required | none
    explore_tool_choice: str = "required"  # the synthesis agent's while exploring
    max_tokens: int = 512  # per reply of the planning, synthesis, verification and reflection agents
    assistant_max_tokens: int = 256
    user_max_tokens: int = 128
    judge_tasks: bool = True  # ask the task-verification agent (else: the executable pre-check alone)
    judge_trajectories: bool = True  # ask the trajectory-verification agent (else: the state checker alone)
    ignore_fields: list[str] = field(default_factory=list)  # state paths the checker ignores (timestamps, ...)
    max_observation_chars: int = 2000  # longer tool outputs are cut

    def __post_init__(self) -> None:
        for name in ("plans", "iterations", "tasks_per_plan", "rollouts_per_task", "max_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.tool_choice not in ("auto", "required", "first-required", "none"):
            raise ValueError(f"tool_choice must be auto, required, first-required or none, got {self.tool_choice!r}")

    def assistant_choice(self, turn: int) -> str:
        if self.tool_choice == "first-required":
            return "required" if turn == 0 else "auto"
        return self.tool_choice
