"""The user simulator (AReaL-SEA §4.3, §5): an LLM that plays the user of an interactive task.

It is driven by the task's user instruction (what the user wants, in the user's words) and private
information (facts the user knows and gives only when asked: ids, emails, preferences). It sees the
conversation from the user's side: the assistant's messages are its interlocutor's, tool calls and
observations are invisible to it. It ends the episode with a stop token:

- `###STOP###`         the goal is reached (or the user has nothing left to ask),
- `###TRANSFER###`     the assistant handed the user over to a human agent,
- `###OUT-OF-SCOPE###` the request cannot be served here / the user is asked for what it doesn't know.

A user may have tools of its own (tau2 telecom: their phone; the profile's `tools`). Given an `act`
function that runs them, the simulator lets the user call them during its turn, before it writes: those
calls and their results are the user's, in its own view (its `device` traffic), never the assistant's.

Used by astra-toolgraph's `evolve rollout` (async, `simulate_user`) and by astra-grpo's episodes (sync,
`UserSimulator`). It lives in astra-core so the trainer does not need the data-synthesis package.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from astra_core.llm import LLMClient, LLMConfig
from astra_core.reasoning import without_reasoning

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)

GREETING = "Hi! How can I help you today?"

USER_SYSTEM = """You are a customer talking to a customer-service assistant. Play this customer; never act as the assistant.

Your goal:
{instruction}

What you know (give a fact only when the assistant asks for it; never invent facts you were not given):
{private_info}

Rules:
- Write one short message at a time, in the first person, as the customer.
- Do not reveal everything at once; answer the assistant's questions.
- When your goal is fully achieved, or you have nothing left to ask, reply with only {stop}.
- If the assistant transfers you to a human agent, reply with only {transfer}.
- If the assistant cannot help with your request, or asks for something you do not know, reply with only {out_of_scope}."""

DEVICE_RULES = """
You can act on your own device with the tools you are given. When the assistant asks you to check or change
something on your device, call the tool yourself (never only say that you did), then tell the assistant what you
saw or did."""

MAX_DEVICE_CALLS = 8  # tool-call rounds a user may make in one turn before it must write


@dataclass(frozen=True)
class UserProfile:
    """Who the simulator plays: the task's user instruction and the private information."""

    instruction: str
    private_info: str = ""
    tools: tuple = ()
    """The user's own tools (OpenAI tool schemas), e.g. tau2 telecom's phone."""

    @classmethod
    def of(cls, spec: dict) -> UserProfile:
        """From a task's or rl_sample's `user` field: {instruction, private_info?, tools?} (private_info may be
        a dict)."""
        private = spec.get("private_info") or ""
        if isinstance(private, dict):
            private = "\n".join(f"- {key}: {value}" for key, value in private.items())
        elif isinstance(private, list):
            private = "\n".join(f"- {item}" for item in private)
        return cls(instruction=str(spec["instruction"]), private_info=str(private), tools=tuple(spec.get("tools") or ()))


@dataclass(frozen=True)
class UserTurn:
    content: str  # the message without any stop token ("" when the reply was only a stop token)
    stop: str | None  # the stop token the reply carried, if any
    raw: str = ""  # the reply as the model wrote it
    device: tuple = ()  # the user's own tool calls of this turn and their results, in the user's view


def system_prompt(profile: UserProfile) -> str:
    text = USER_SYSTEM.format(instruction=profile.instruction, private_info=profile.private_info or "(nothing more)",
                              stop=STOP, transfer=TRANSFER, out_of_scope=OUT_OF_SCOPE)
    return text + DEVICE_RULES if profile.tools else text


def user_view(profile: UserProfile, messages: list[dict], *, awaiting_reply: bool = True) -> list[dict]:
    """The conversation as the user model sees it: roles swapped, tool traffic and system turns dropped.

    `messages` is the assistant's conversation (system, user, assistant with or without tool calls,
    tool). The user model's own earlier messages become its `assistant` turns, after the tool traffic
    of its own device they carry (`device`); the assistant's visible text becomes `user` turns, and the
    conversation opens with the assistant's greeting.
    `awaiting_reply`: the user is about to speak, so the view must end with the assistant's turn.
    """
    view = [{"role": "system", "content": system_prompt(profile)}, {"role": "user", "content": GREETING}]
    for message in messages:
        role, content = message["role"], message.get("content")
        if role == "user":
            view += message.get("device") or []
            view.append({"role": "assistant", "content": content or ""})
        elif role == "assistant":
            said = without_reasoning(content or "")  # the user sees what the assistant says, not its reasoning
            if said:
                view.append({"role": "user", "content": said})
    if awaiting_reply and view[-1]["role"] == "assistant":
        view.append({"role": "user", "content": "(The assistant is waiting for your reply.)"})
    return view


def parse_user_reply(text: str) -> UserTurn:
    """Split a reply into the message and its stop token (the first one it names, anywhere in what the user says:
    a user model's reasoning is neither said to the assistant nor a stop)."""
    raw = text or ""
    said = without_reasoning(raw)
    found = [(said.find(token), token) for token in STOP_TOKENS if token in said]
    stop = min(found)[1] if found else None
    content = said
    for token in STOP_TOKENS:
        content = content.replace(token, "")
    return UserTurn(content=content.strip(), stop=stop, raw=raw)


async def simulate_user(llm: LLMClient, profile: UserProfile, messages: list[dict], *, max_tokens: int = 128,
                        temperature: float | None = None) -> UserTurn:
    """The user's next turn given the assistant's conversation so far."""
    params = {"max_tokens": max_tokens}
    if temperature is not None:
        params["temperature"] = temperature
    reply = await llm.chat(user_view(profile, messages), **params)
    return _final_turn(reply.content or "")


def _final_turn(text: str) -> UserTurn:
    turn = parse_user_reply(text)
    if not turn.content and turn.stop is None:
        return UserTurn(content="", stop=STOP, raw=turn.raw)  # an empty reply: the user has nothing to say
    return turn


Act = Callable[[str, dict, str], str]
"""Runs one of the user's own tools: (name, arguments, call id) -> the result the user sees."""


def device_results(calls: list[dict], act: Act) -> list[dict]:
    """The user's tool calls run by `act`, as tool messages of the user's view."""
    results = []
    for call in calls:
        try:
            arguments = json.loads(call["function"].get("arguments") or "{}")
        except ValueError:
            arguments = None
        output = (act(call["function"]["name"], arguments, call["id"]) if isinstance(arguments, dict)
                  else "Error: the arguments are not a JSON object")
        results.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return results


class UserSimulator:
    """A synchronous user simulator over an OpenAI-compatible endpoint, safe to call from worker threads:
    what astra-grpo's episodes use. One client (one connection pool) on one event loop in a background
    thread serves every call; `close()` (or use as a context manager) stops it."""

    def __init__(self, config: LLMConfig | None = None, *, max_tokens: int = 128, temperature: float | None = None):
        self.config = config or LLMConfig.from_env()
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: LLMClient | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="astra-user-simulator", daemon=True)
                self._thread.start()
                self._client = asyncio.run_coroutine_threadsafe(self._open(), loop).result()
                self._loop = loop
            return self._loop

    async def _open(self) -> LLMClient:
        return await LLMClient(self.config).__aenter__()

    def reply(self, user: dict, messages: list[dict], act: Act | None = None) -> UserTurn:
        """The user's next turn. A user with tools of its own calls them through `act` (in the caller's
        thread) until it writes, at most MAX_DEVICE_CALLS rounds; the turn's `device` holds that traffic."""
        loop = self._start()
        profile = UserProfile.of(user)
        if not (profile.tools and act):
            profile = replace(profile, tools=())  # nothing to act with: not told that it could
            turn = simulate_user(self._client, profile, messages, max_tokens=self.max_tokens,
                                 temperature=self.temperature)
            return asyncio.run_coroutine_threadsafe(turn, loop).result()
        view, device = user_view(profile, messages), []
        for rounds in range(MAX_DEVICE_CALLS + 1):
            asked = self._client.chat(view + device, tools=list(profile.tools), max_tokens=self.max_tokens,
                                      temperature=self.temperature)
            response = asyncio.run_coroutine_threadsafe(asked, loop).result()
            if not response.tool_calls or rounds == MAX_DEVICE_CALLS:
                break
            calls = [{**call, "id": call.get("id") or f"device_{rounds}_{index}"}  # a result answers a call by its id
                     for index, call in enumerate(response.tool_calls)]
            device.append({"role": "assistant", "content": response.content or None, "tool_calls": calls})
            device += device_results(calls, act)
        return replace(_final_turn(response.content or ""), device=tuple(device))

    def close(self) -> None:
        with self._lock:
            loop, client, self._loop, self._client = self._loop, self._client, None, None
        if loop is None:
            return
        asyncio.run_coroutine_threadsafe(client.__aexit__(None, None, None), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join()
        loop.close()

    def __enter__(self) -> UserSimulator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def user_sft_messages(profile: UserProfile, messages: list[dict], stop: str | None) -> list[dict]:
    """A trajectory turned into user-model SFT data: the user's view, ending with its stop token."""
    view = user_view(profile, messages, awaiting_reply=False)
    if stop is not None:
        if view[-1]["role"] == "assistant":
            view[-1] = {"role": "assistant", "content": f"{view[-1]['content']} {stop}".strip()}
        else:
            view.append({"role": "assistant", "content": stop})
    return view
