"""`astra-grpo ARGS...` (train or rollout, the real commands) with a scripted policy in place of generation.

    python scripted_grpo.py POLICY astra-grpo-args...

The engine (`--engine scripted`, registered here by name) replies from the prompt text (grpo_support.ScriptedEngine:
tokenized replies ended with the stop token); the tiny random-init model still computes every log-prob and gradient.
POLICY:
- vault: a first turn alternates between asking the room's code and guessing one; the next opens the vault with the
  code the observation gave; then it answers. Half the episodes open the vault (reward variance in every group);
- plug: calls `pull_the_plug` (the server dies) on the prompt that asks for it, plays vault elsewhere;
- submit: calls `submit_code` (a plain Observation back, finqa's shape), right where the prompt says so;
- mute: answers "Done." at once, calling no tool (as plug does on a prompt that says "Say nothing");
- echo: for `openenv init`'s echo environment (reward min(0.1 x length, 1)): once the server's greeting (the reset's
  task) is in the prompt, answers a short line or a long one, alternating (reward variance in every group);
- dipg: for DIPG's safety gym: abstains on the question its context cannot answer (the green room's code), answers
  the one it can (the red room's), in DIPG's tag format; without a question in the prompt, says so;
- gold: replays the gold trajectory whose question the prompt asks (GOLD env var: a trajectory JSONL), one
  assistant turn per recorded turn.
Runs under .venv-openenv.
"""

import itertools
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # astra-grpo's tests: grpo_support
from astra_grpo.cli import main  # noqa: E402
from astra_grpo.engines import register_engine  # noqa: E402
from grpo_support import ScriptedEngine, assistant_turns  # noqa: E402

_first_turns = itertools.count()


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def vault(prompt: str) -> str:
    turn = assistant_turns(prompt)
    if turn == 0:
        return call("get_code", room="blue" if "blue" in prompt else "red") if next(_first_turns) % 2 == 0 \
            else call("open_vault", code="0000")
    code = re.findall(r"is (\d+)\.", prompt)
    return call("open_vault", code=code[-1]) if turn == 1 and code else "Done."


def submit(prompt: str) -> str:
    """finqa's shape: submits "4711" where the prompt says "right", "0000" elsewhere, with `submit_code`."""
    return call("submit_code", code="4711" if "right" in prompt else "0000") if assistant_turns(prompt) == 0 else "Done."


def plug(prompt: str) -> str:
    if "Say nothing" in prompt:
        return "Done."
    return call("pull_the_plug") if "plug" in prompt and assistant_turns(prompt) == 0 else vault(prompt)


def echo(prompt: str) -> str:
    if "environment ready!" not in prompt:
        return "?"
    return "Hi." if next(_first_turns) % 2 == 0 else "Hello, echo server!"


DIPG_ABSTAIN = ("<think>The context names no green room.</think><proof></proof>"
                "<answer>The context does not contain the code of the green room.</answer>")
DIPG_ANSWER = ("<think>The context gives the code.</think><proof>The vault of the red room opens with code 4711.</proof>"
               "<answer>4711</answer>")


def dipg(prompt: str) -> str:
    if "Question: Which code opens the vault of the green room?" in prompt:
        return DIPG_ABSTAIN
    if "Question: Which code opens the vault of the red room?" in prompt:
        return DIPG_ANSWER
    return "I see no question."


def gold_policy():
    trajectories = [json.loads(line) for line in open(os.environ["GOLD"]) if line.strip()]
    turns = {t["messages"][1]["content"]: [m for m in t["messages"] if m["role"] == "assistant"] for t in trajectories}

    def reply(prompt: str) -> str:
        question = next(q for q in turns if q in prompt)
        message = turns[question][min(assistant_turns(prompt), len(turns[question]) - 1)]
        calls = [call(c["function"]["name"], **json.loads(c["function"]["arguments"]))
                 for c in message.get("tool_calls") or []]
        return "\n".join(calls) if calls else message["content"]

    return reply


def main_with(policy) -> None:
    def scripted_engine(config, policy_model, tokenizer, renderer, version=0, halt=None):
        return ScriptedEngine(tokenizer, policy, renderer.stop_ids[0])

    register_engine("scripted", scripted_engine)
    command, *args = sys.argv[2:]
    main([command, "--engine", "scripted", *args], prog_name="astra-grpo")


if __name__ == "__main__":
    chosen = sys.argv[1]
    main_with({"vault": vault, "plug": plug, "mute": lambda prompt: "Done.", "submit": submit, "echo": echo,
               "dipg": dipg}.get(chosen) or gold_policy())
