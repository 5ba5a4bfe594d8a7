"""The user simulator: stop tokens, the user's view of a conversation, and a recorded-reply turn
(the `recorded_llm` fixture serves RECORDED replies over real HTTP)."""

import pytest
from astra_core.llm import LLMConfig
from astra_core.users import (
    GREETING,
    OUT_OF_SCOPE,
    STOP,
    TRANSFER,
    UserProfile,
    UserSimulator,
    parse_user_reply,
    user_view,
)


@pytest.mark.parametrize(("text", "content", "stop"), [
    ("Great, thanks! ###STOP###", "Great, thanks!", STOP),
    ("###TRANSFER###", "", TRANSFER),
    ("I don't know that. ###OUT-OF-SCOPE### ###STOP###", "I don't know that.", OUT_OF_SCOPE),
    ("My email is ada@example.com.", "My email is ada@example.com.", None),
])
def test_stop_tokens_are_found_and_removed(text, content, stop):
    turn = parse_user_reply(text)
    assert (turn.content, turn.stop, turn.raw) == (content, stop, text)


def test_the_user_sees_the_assistant_as_its_interlocutor_and_no_tool_traffic():
    profile = UserProfile.of({"instruction": "Buy coffee.", "private_info": {"email": "ada@example.com"}})
    conversation = [
        {"role": "system", "content": "You are an assistant."},
        {"role": "user", "content": "I want coffee."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                               "function": {"name": "x", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "secret tool output"},
        {"role": "assistant", "content": "What is your email?"},
    ]
    view = user_view(profile, conversation)
    assert [m["role"] for m in view] == ["system", "user", "assistant", "user"]
    assert view[1]["content"] == GREETING and view[2]["content"] == "I want coffee."
    assert "- email: ada@example.com" in view[0]["content"] and "Buy coffee." in view[0]["content"]
    assert all("secret" not in m["content"] for m in view)


def test_the_sync_simulator_answers_from_worker_threads(recorded_llm):
    from concurrent.futures import ThreadPoolExecutor

    server = recorded_llm(replies=["Sure, it is ada@example.com."])
    simulator = UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0), max_tokens=16)
    with ThreadPoolExecutor(2) as pool:
        turns = list(pool.map(lambda _: simulator.reply({"instruction": "Buy coffee."},
                                                        [{"role": "assistant", "content": "Your email?"}]), range(2)))
    assert all(t.content == "Sure, it is ada@example.com." and t.stop is None for t in turns)
    assert all(r["max_tokens"] == 16 for r in server.requests)
