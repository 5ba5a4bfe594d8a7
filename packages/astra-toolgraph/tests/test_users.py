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
    # a reasoning model as the user: its thoughts are neither said nor a stop (vLLM without a reasoning parser)
    ("<think>Not ###STOP### yet: ask about the price.</think>How much is it?", "How much is it?", None),
    ("I got my answer, so I end.\n</think>\n\nThanks! ###STOP###", "Thanks!", STOP),  # R1-style
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
        {"role": "assistant", "content": "<think>I need the secret email first.</think>"},  # only reasoning
        {"role": "assistant", "content": "<think>The secret plan: ask for the email.</think>What is your email?"},
    ]
    view = user_view(profile, conversation)
    assert [m["role"] for m in view] == ["system", "user", "assistant", "user"]
    assert view[3]["content"] == "What is your email?"  # the assistant's reasoning is not said to the user
    assert view[1]["content"] == GREETING and view[2]["content"] == "I want coffee."
    assert "- email: ada@example.com" in view[0]["content"] and "Buy coffee." in view[0]["content"]
    assert all("secret" not in m["content"] for m in view)


def test_the_sync_simulator_answers_from_worker_threads(recorded_llm):
    from concurrent.futures import ThreadPoolExecutor

    server = recorded_llm(replies=["Sure, it is ada@example.com."])
    with (UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0), max_tokens=16) as simulator,
          ThreadPoolExecutor(2) as pool):
        turns = list(pool.map(lambda _: simulator.reply({"instruction": "Buy coffee."},
                                                        [{"role": "assistant", "content": "Your email?"}]), range(2)))
    assert all(t.content == "Sure, it is ada@example.com." and t.stop is None for t in turns)
    assert all(r["max_tokens"] == 16 for r in server.requests)


PHONE = [{"type": "function", "function": {"name": "toggle_wifi", "description": "Turn Wi-Fi on or off.",
                                           "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}}}}}]


def wifi_call(call_id: str, arguments: str) -> dict:
    return {"content": None, "tool_calls": [{"id": call_id, "type": "function",
                                             "function": {"name": "toggle_wifi", "arguments": arguments}}]}


def test_a_users_calls_without_ids_are_numbered_so_their_results_answer_them(recorded_llm):
    """RECORDED reply of a server that leaves out call ids: the device results still answer their calls (a KeyError
    before)."""
    call = {"type": "function", "function": {"name": "toggle_wifi", "arguments": '{"on": true}'}}
    server = recorded_llm(replies=[{"content": None, "tool_calls": [call, call]}, "Wi-Fi is on now."])
    acted = []
    with UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0)) as simulator:
        turn = simulator.reply({"instruction": "Get online.", "tools": PHONE}, [], act=lambda *a: acted.append(a) or "ON")
    assert [a[2] for a in acted] == ["device_0_0", "device_0_1"]
    assert [m.get("tool_call_id") for m in turn.device] == [None, "device_0_0", "device_0_1"]
    assert [c["id"] for c in turn.device[0]["tool_calls"]] == ["device_0_0", "device_0_1"]


def test_a_user_with_tools_of_its_own_calls_them_through_act_then_writes(recorded_llm):
    # RECORDED replies: a call, a call whose arguments are not JSON, then the user's message
    server = recorded_llm(replies=[wifi_call("w1", '{"on": true}'), wifi_call("w2", "{on"), "Wi-Fi is on now."])
    acted = []

    def act(name, arguments, call_id):
        acted.append((name, arguments, call_id))
        return "Wi-Fi: ON"

    user = {"instruction": "Get online.", "tools": PHONE}
    with UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0)) as simulator:
        turn = simulator.reply(user, [{"role": "assistant", "content": "Please turn Wi-Fi on."}], act=act)
    assert (turn.content, turn.stop) == ("Wi-Fi is on now.", None)
    assert acted == [("toggle_wifi", {"on": True}, "w1")]  # the malformed call never reaches the device
    assert [m["role"] for m in turn.device] == ["assistant", "tool", "assistant", "tool"]
    assert turn.device[1]["content"] == "Wi-Fi: ON" and turn.device[3]["content"].startswith("Error:")
    assert all(r["tools"][0]["function"]["name"] == "toggle_wifi" for r in server.requests)
    assert "act on your own device" in server.requests[0]["messages"][0]["content"]
    assert server.requests[2]["messages"][-4:] == [dict(m) for m in turn.device]  # it saw its own traffic
    # in later turns the user sees its device traffic before its own message, the assistant never does
    later = user_view(UserProfile.of(user), [{"role": "assistant", "content": "Please turn Wi-Fi on."},
                                            {"role": "user", "content": turn.content, "device": list(turn.device)},
                                            {"role": "assistant", "content": "Anything else?"}])
    assert [m["role"] for m in later[2:]] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "user"]


def test_a_user_that_only_calls_tools_is_cut_off_and_ends_the_conversation(recorded_llm):
    from astra_core.users import MAX_DEVICE_CALLS

    server = recorded_llm(replies=[wifi_call("w", "{}")])  # the same call, every time
    with UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0)) as simulator:
        turn = simulator.reply({"instruction": "Get online.", "tools": PHONE}, [], act=lambda *_: "Wi-Fi: ON")
    assert len(server.requests) == MAX_DEVICE_CALLS + 1
    assert len(turn.device) == 2 * MAX_DEVICE_CALLS and turn.stop == STOP and turn.content == ""


def test_without_act_a_user_with_tools_is_asked_as_before(recorded_llm):
    server = recorded_llm(replies=["Hello."])
    with UserSimulator(LLMConfig(base_url=server.base_url, max_retries=0)) as simulator:
        turn = simulator.reply({"instruction": "Get online.", "tools": PHONE}, [])
    assert turn.content == "Hello." and turn.device == () and "tools" not in server.requests[0]
    assert "act on your own device" not in server.requests[0]["messages"][0]["content"]
