"""Every knob of the self-evolving engine, in one documented dataclass."""

from __future__ import annotations

from dataclasses import dataclass

from astra_core.config import check_knobs, knob

TOOL_CHOICES = ("auto", "required", "first-required", "none")
USER_OPENINGS = ("simulated", "question")


@dataclass
class EvolveConfig:
    plans: int = knob(4, "N: plan pairs generated per domain (one stream each).", minimum=1)
    iterations: int = knob(3, "K: synthesis -> verification -> rollout -> verification -> reflection rounds per "
                              "stream.", minimum=1)
    tasks_per_plan: int = knob(4, "Candidate tasks synthesized per plan and iteration.", minimum=1)
    explore_turns: int = knob(2, "Tool-calling turns of the task-synthesis agent before it writes a task.",
                               minimum=0)
    rollouts_per_task: int = knob(1, "Trajectories per verified task.", minimum=1)
    max_turns: int = knob(12, "Assistant turns (tool calls and messages) per trajectory.", minimum=1)
    max_user_turns: int = knob(6, "User-simulator messages per trajectory (after the first).", minimum=0)
    tool_choice: str = knob("auto", "The assistant's tool choice.", choices=TOOL_CHOICES)
    explore_tool_choice: str = knob("required", "The synthesis agent's tool choice while exploring.",
                                    choices=TOOL_CHOICES)
    max_tokens: int = knob(512, "Tokens per reply of the planning, synthesis, verification and reflection agents.",
                           flag="agent-max-tokens", minimum=1)
    assistant_max_tokens: int = knob(256, "Tokens per assistant turn.", minimum=1)
    user_max_tokens: int = knob(128, "Tokens per user-simulator turn.", minimum=1)
    user_opening: str = knob("simulated", "The trajectory's first user message: simulated (the user simulator writes it "
                                          "from its instruction) or question (the task's question, verbatim: the "
                                          "same opening in every rollout; the simulator speaks from the second "
                                          "message on).", choices=USER_OPENINGS)
    judge_tasks: bool = knob(True, "Ask the task-verification agent (else the executable pre-check alone).")
    judge_trajectories: bool = knob(True, "Ask the trajectory-verification agent (else the state checker alone).")
    verify_calls: int = knob(0, "Tool calls each verification agent (task and trajectory) may make in a disposable "
                                "episode of the domain before its verdict; 0 = one judge call over the replay "
                                "(the cheap option).", minimum=0)
    verify_tool_choice: str = knob("first-required", "The verification agents' tool choice while investigating.",
                                   choices=TOOL_CHOICES)
    ignore_fields: list[str] = knob([], "State path patterns the task's checker ignores (timestamps, ...).",
                                    flag="ignore-field")
    max_observation_chars: int = knob(2000, "Longer tool outputs are cut.", minimum=1)

    def __post_init__(self) -> None:
        check_knobs(self)  # every knob's choices and bounds (the CLI checks them too; a library caller not)

    def assistant_choice(self, turn: int) -> str:
        return choice_at(self.tool_choice, turn)

    def verifier_choice(self, turn: int) -> str:
        return choice_at(self.verify_tool_choice, turn)


def choice_at(tool_choice: str, turn: int) -> str:
    """The OpenAI tool_choice of a turn: "first-required" is "required" on turn 0, "auto" after."""
    if tool_choice == "first-required":
        return "required" if turn == 0 else "auto"
    return tool_choice
