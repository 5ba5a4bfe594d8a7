"""The verification agents' own tool-calling loop (AReaL-SEA §4.3).

Before its verdict, a task- or trajectory-verification agent investigates the domain with the
domain's tools: it reads the records the task names, tries whether the expected actions are possible
and enough. It works in a disposable episode (a fresh astra-sandbox session or MCP server process,
discarded afterwards), so a write tool it calls never reaches the data any task or trajectory is
checked against. The loop is bounded by `EvolveConfig.verify_calls` tool calls; a turn without a call
ends it early. Every call it made is kept beside the verdict (`verification.investigation`).
With `verify_calls = 0` the agents are the single judge call over the replay (the cheap option).
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_core.llm import LLMClient, StructuredOutputError

from astra_toolgraph.evolve.agent import tool_turn
from astra_toolgraph.evolve.config import EvolveConfig
from astra_toolgraph.evolve.domains import Domain
from astra_toolgraph.evolve.plans import AgentFailed

VERDICT_NOW = {"role": "user", "content": "That is the end of your investigation. Give your verdict as JSON now: "
                                          "first your reasons (what you checked and found), then the verdict."}


@dataclass
class Investigation:
    messages: list[dict]  # the verifier's conversation, its tool calls and their results
    calls: list[dict]  # every tool call it made: {turn, tool, arguments, ok, observation}
    exhausted: bool  # the budget ran out (else the agent stopped calling tools on its own)

    def record(self, budget: int) -> dict:
        return {"budget": budget, "calls": self.calls, "exhausted": self.exhausted}


async def investigate(llm: LLMClient, messages: list[dict], domain: Domain, config: EvolveConfig) -> Investigation:
    """Up to `config.verify_calls` tool calls in a disposable episode of `domain`, continuing `messages`."""
    messages, calls = list(messages), []
    async with domain.episode() as episode:
        turn = 0
        while len(calls) < config.verify_calls:
            if not await _turn(llm, messages, domain, episode, turn, config, calls):
                return Investigation(messages, calls, exhausted=False)
            turn += 1
    return Investigation(messages, calls, exhausted=True)


async def _turn(llm: LLMClient, messages: list[dict], domain: Domain, episode, turn: int, config: EvolveConfig,
                calls: list[dict]) -> bool:
    """One verifier turn: its calls within the budget run and are recorded in `calls`; False when it made none."""
    return await tool_turn(llm, messages, domain.tools, episode, turn=turn, tool_choice=config.verifier_choice(turn),
                           max_tokens=config.max_tokens, observation_chars=config.max_observation_chars,
                           executions=calls, max_calls=config.verify_calls - len(calls), detailed=True)


async def verdict(llm: LLMClient, messages: list[dict], schema: dict, name: str, domain: Domain | None,
                  config: EvolveConfig) -> tuple[dict, dict | None]:
    """(the verdict reply, the investigation record or None): the single judge call when
    `config.verify_calls` is 0, else the tool loop first. Raises AgentFailed when the verdict does not parse."""
    investigation = None
    if config.verify_calls:
        if domain is None:
            raise AgentFailed(f"{name}: --verify-calls needs the domain (--domains)")
        investigation = await investigate(llm, messages, domain, config)
        messages = [*investigation.messages, VERDICT_NOW]
    stage = name.replace("_verdict", " verification")
    try:
        reply, _ = await llm.chat_json(messages, schema, name=name, attempts=2, max_tokens=config.max_tokens)
    except StructuredOutputError as exc:
        raise AgentFailed(f"{stage}: {exc}") from None
    problem = rationale_problem(str(reply.get("rationale", "")), messages[0]["content"])
    if problem:
        raise AgentFailed(f"{stage}: {problem} (verdict {reply.get('verdict')} not taken)")
    return reply, (investigation.record(config.verify_calls) if investigation else None)


def rationale_problem(rationale: str, instructions: str) -> str | None:
    """Why a verdict is not reasoned (no rationale, or the instructions echoed back), or None."""
    text = " ".join(rationale.split()).strip(" .\"'").lower()
    if len(text.split()) < 2:
        return f"the verdict has no rationale ({rationale!r})"
    if text in " ".join(instructions.split()).lower():
        return f"the rationale repeats the instructions ({rationale[:80]!r})"
    return None
