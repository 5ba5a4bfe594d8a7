"""Trajectory quality judge: the seven dimensions of paper §2.1.5 (Eq. 2–10), their mean as `overall`.

Let τ = messages m0..m(k-1), m0 the system prompt (when the first message is one), m1 the user's
request. The judge never sees m0.

- QU, QP (Eq. 3–4): one judgment each over τ \\ {m0}, focused on the first assistant response;
  scale {0, 0.5, 1}. A trajectory with no assistant message scores 0 on both.
- TCU, TCP (Eq. 5–7): tool calls are grouped into rounds u_1..u_J — an assistant message with
  tool calls, together with any assistant messages with tool calls that directly follow it (some
  formats put parallel calls in separate messages), is one round; t_j is the index of the round's
  last message. u_1 has no preceding tool response, so rounds j = 2..J are judged, each with the
  history c_j = m1..m(t_j) and the round's calls; scale {0, 0.5, 1}; the dimension is the mean
  over rounds. Not applicable when J < 2.
- TCS (Eq. 8): programmatic, not judged. Call i succeeds (S_i = 1) unless it names a tool that is
  not in the record's `tools`, its arguments are not a JSON object, it got no tool response, or
  its response is an error (`astra_reward.conversation.is_error_observation`: "Error…:" text, a
  traceback, a JSON object with a truthy "error"/"isError"). An error that a tool reports in any
  other words is not recognised. Not applicable without calls.
- TC (Eq. 9): one judgment over the whole trajectory scoring every call 0 or 1 (appendix A.3,
  Example Prompt 2); the mean over calls. Not applicable without calls.
- FA (Eq. 10): (Corr + Summ) / 2, Corr judged on the user's request and the final answer only,
  Summ on τ \\ {m0}; each on {0, 0.5, 1}. A trajectory without a final answer (its last assistant
  message makes tool calls, or there is none) scores FA = 0 without asking.
- overall: the mean of the applicable dimensions (see `scorecard` for missing ones).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from astra_core.llm import LLMClient

from astra_reward.conversation import ToolCall, final_answer, is_error_observation, message_text, tool_calls
from astra_reward.judges import prompts
from astra_reward.judges.asking import JudgeSettings, Reply, ask, item_errors, item_scores, single_score
from astra_reward.judges.prompts import BINARY, THREE_LEVELS
from astra_reward.judges.render import clip, tools_text, transcript
from astra_reward.judges.scorecard import Scorecard

DIMENSIONS = ("QU", "QP", "TCU", "TCP", "TCS", "TC", "FA")


@dataclass
class Round:
    number: int  # j, from 1
    message_indices: list[int]  # the assistant message(s) issuing the round's calls; t_j is the last
    calls: list[ToolCall]
    responses: list[int]  # tool messages between the previous round and this one


def tool_call_rounds(messages: list[dict], calls: list[ToolCall]) -> list[Round]:
    """The grouped tool-call rounds u_1..u_J in temporal order (see the module docstring)."""
    rounds: list[Round] = []
    previous_end = -1
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        round_calls = [call for call in calls if call.message_index == index]
        if rounds and rounds[-1].message_indices[-1] == index - 1:
            rounds[-1].message_indices.append(index)
            rounds[-1].calls.extend(round_calls)
        else:
            responses = [i for i in range(previous_end + 1, index) if messages[i].get("role") == "tool"]
            rounds.append(Round(len(rounds) + 1, [index], round_calls, responses))
        previous_end = index
    return rounds


def call_status(call: ToolCall, tool_names: set[str]) -> tuple[int, str]:
    """S_i of Eq. 8 with the reason."""
    if tool_names and call.name not in tool_names:
        return 0, f"undefined tool {call.name!r}"
    if call.arguments_object is None:
        return 0, "arguments are not a JSON object"
    if call.observation is None:
        return 0, "no tool response"
    if is_error_observation(call.observation):
        return 0, "error response"
    return 1, "ok"


async def judge_trajectory(client: LLMClient, record: dict, settings: JudgeSettings | None = None) -> dict:
    """The seven scores of a trajectory record, `overall`, `not_applicable`, `judge_errors` and `details`."""
    settings = settings or JudgeSettings()
    messages = record["messages"]
    calls = tool_calls(messages)
    rounds = tool_call_rounds(messages, calls)
    start = 1 if messages and messages[0].get("role") == "system" else 0
    card = Scorecard(DIMENSIONS, details={"rounds": len(rounds), "calls": len(calls)})
    tools = tools_text(record.get("tools"))

    def material(end: int = len(messages), focus: str = "") -> str:
        return prompts.TRAJECTORY_USER.substitute(
            tools=tools, focus=focus,
            transcript=transcript(messages, calls, start=start, end=end, max_chars=settings.max_chars))

    def judged(judgment: prompts.Judgment, material: str):
        return ask(client, judgment, material, settings)

    call_number = {id(call): number for number, call in enumerate(calls, start=1)}
    whole = material()
    asks: dict[str, object] = {}
    has_assistant = any(m.get("role") == "assistant" for m in messages[start:])
    if has_assistant:
        asks["QU"] = judged(prompts.QUERY_UNDERSTANDING, whole)
        asks["QP"] = judged(prompts.QUERY_PLANNING, whole)
    for round_ in rounds[1:]:
        focus = prompts.ROUND_FOCUS.substitute(
            round=round_.number, rounds=len(rounds), round_messages=_numbers(round_.message_indices),
            calls=_numbers(f"#{call_number[id(c)]}" for c in round_.calls),
            responses=_numbers(round_.responses) or "none")
        round_material = material(end=round_.message_indices[-1] + 1, focus=focus)
        asks[f"TCU/{round_.number}"] = judged(prompts.ROUND_UNDERSTANDING, round_material)
        asks[f"TCP/{round_.number}"] = judged(prompts.ROUND_PLANNING, round_material)
    if calls:
        asks["TC"] = judged(prompts.TOOL_CONCISENESS, whole)
    answer = final_answer(messages)
    if answer is not None:
        query = next((message_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
        asks["Corr"] = judged(prompts.ANSWER_CORRELATION, prompts.CORRELATION_USER.substitute(
            query=clip(query, settings.max_chars), answer=clip(answer, settings.max_chars)))
        asks["Summ"] = judged(prompts.ANSWER_SUMMARY, whole)
    replies: dict[str, Reply] = dict(zip(asks, await asyncio.gather(*asks.values()), strict=True))

    _query_scores(card, replies, has_assistant)
    _round_scores(card, replies, rounds)
    _call_scores(card, replies, calls, record.get("tools") or [])
    _answer_score(card, replies, answer)
    return card.scores("overall")


def _numbers(items) -> str:
    return ", ".join(str(item) for item in items)


def _query_scores(card: Scorecard, replies: dict[str, Reply], has_assistant: bool) -> None:
    for dimension in ("QU", "QP"):
        if not has_assistant:
            card.set(dimension, 0.0)
            card.details[dimension] = {"reason": "no assistant message"}
            continue
        score, reason, error = single_score(replies[dimension], THREE_LEVELS)
        card.set(dimension, score, error)
        card.details[dimension] = {"score": score, "reason": reason}


def _round_scores(card: Scorecard, replies: dict[str, Reply], rounds: list[Round]) -> None:
    if len(rounds) < 2:
        card.skip("TCU", "fewer than two tool-call rounds")
        card.skip("TCP", "fewer than two tool-call rounds")
        return
    for dimension in ("TCU", "TCP"):
        per_round, errors = [], []
        for round_ in rounds[1:]:
            score, reason, error = single_score(replies[f"{dimension}/{round_.number}"], THREE_LEVELS)
            per_round.append({"round": round_.number, "messages": round_.message_indices, "score": score,
                              "reason": reason})
            if error:
                errors.append(f"round {round_.number}: {error}")
        scores = [r["score"] for r in per_round]
        card.set(dimension, None if errors else sum(scores) / len(scores), errors)
        card.details[dimension] = per_round


def _call_scores(card: Scorecard, replies: dict[str, Reply], calls: list[ToolCall], tools: list[dict]) -> None:
    if not calls:
        card.skip("TCS", "no tool calls")
        card.skip("TC", "no tool calls")
        return
    names = {(t.get("function") or {}).get("name") for t in tools} - {None}
    statuses = [call_status(call, names) for call in calls]
    card.set("TCS", sum(ok for ok, _ in statuses) / len(calls))
    card.details["TCS"] = [{"call": i, "name": call.name, "ok": ok, "why": why}
                           for i, (call, (ok, why)) in enumerate(zip(calls, statuses, strict=True), start=1)]
    wanted = [str(i) for i in range(1, len(calls) + 1)]
    scores, reasons, problems = item_scores(replies["TC"], "calls", "index", wanted, BINARY)
    errors = item_errors(wanted, scores, problems, "call")
    card.set("TC", None if errors else sum(scores.values()) / len(calls), errors)
    card.details["TC"] = [{"call": int(i), "score": scores.get(i), "reason": reasons.get(i)} for i in wanted]


def _answer_score(card: Scorecard, replies: dict[str, Reply], answer: str | None) -> None:
    if answer is None:
        card.set("FA", 0.0)
        card.details["FA"] = {"reason": "no final answer: the last assistant message makes tool calls, or none"}
        return
    parts, errors = {}, []
    for part in ("Corr", "Summ"):
        score, reason, error = single_score(replies[part], THREE_LEVELS)
        parts[part] = {"score": score, "reason": reason}
        if error:
            errors.append(f"{part}: {error}")
    card.set("FA", None if errors else (parts["Corr"]["score"] + parts["Summ"]["score"]) / 2, errors)
    card.details["FA"] = parts
