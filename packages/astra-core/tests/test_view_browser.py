"""The report in a real browser: Debian's chromium, headless, driven by playwright (scripts/setup installs it)."""

import importlib.util
import io
import json
import threading
import time
from pathlib import Path

import pytest
from astra_core.formats_doc import example
from astra_core.records import KINDS
from astra_core.view import load
from astra_core.view.report import render
from astra_core.view.serve import Index, make_server
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("screenshot_report", ROOT / "scripts" / "screenshot_report.py")
shots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shots)


@pytest.fixture(scope="module")
def browser():
    if not Path(shots.CHROMIUM).exists():
        pytest.fail(f"{shots.CHROMIUM} is missing: run make setup (it installs Debian's chromium)")
    with sync_playwright() as playwright:
        browser = shots.launch(playwright)
        yield browser
        browser.close()


def write_lines(path: Path, *records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def report(tmp_path: Path, *paths: Path) -> Path:
    out = tmp_path / "report.html"
    out.write_text(render(load([str(p) for p in paths])))
    return out


def trajectory(record_id: str, **changes) -> dict:
    return {**example("trajectory"), "id": record_id, **changes}


def test_filter_to_rejects_open_a_trajectory_and_see_its_tool_call(browser, tmp_path):
    kept = write_lines(tmp_path / "trajectories.jsonl", trajectory("traj-a"), trajectory("traj-b"))
    rejects = write_lines(tmp_path / "judged.rejects.jsonl",
                          {"id": "traj-c", "reason": "below min score: overall 0.2 < 0.5",
                           "stage": "astra-reward judge-trajectory", "record": trajectory("traj-c")})
    page = shots.open_report(browser, report(tmp_path, kept, rejects))
    expect(page.locator("#entries tbody tr")).to_have_count(3)

    page.select_option("#f-status", "rejected")
    rows = page.locator("#entries tbody tr")
    expect(rows).to_have_count(1)
    expect(page.locator("#count")).to_have_text("1 of 3 records")
    expect(rows.first).to_contain_text("below min score")
    rows.first.click()

    expect(page.locator(".rejection")).to_contain_text("below min score: overall 0.2 < 0.5")
    expect(page.locator(".heading .id")).to_have_text("traj-c")
    call = page.locator(".transcript details.tool-call")
    expect(call.locator("summary")).to_contain_text("get_weather")
    call.locator("summary").click()
    expect(call.locator("pre")).to_contain_text('"city": "Oslo"')
    expect(page.locator(".transcript .role-tool")).to_contain_text('"temp_c": 3')

    png = page.screenshot(path=str(tmp_path / "trajectory.png"), full_page=True)
    assert not shots.is_blank(png)
    assert page.errors == []


def test_a_users_own_device_calls_show_in_its_turn(browser, tmp_path):
    # tau2 telecom: the user toggled airplane mode on its phone before it wrote
    phone = [{"role": "assistant", "content": None, "tool_calls": [{"id": "u1", "type": "function", "function": {
                 "name": "toggle_airplane_mode", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "u1", "content": "Airplane Mode is now OFF."}]
    messages = [{"role": "user", "content": "No data."}, {"role": "assistant", "content": "Turn airplane mode off."},
                {"role": "user", "content": "Done, it is off.", "device": phone},
                {"role": "user", "content": "odd", "device": ["x", None, {"role": "tool"}]}]
    page = shots.open_report(browser, report(tmp_path, write_lines(tmp_path / "t.jsonl",
                                                                   trajectory("t1", messages=messages))))
    page.locator("#entries tbody tr").first.click()
    device = page.locator(".transcript details.device").first
    expect(device.locator("summary").first).to_have_text("on the user's own device: 1 call")
    expect(device.locator("details.tool-call summary")).to_contain_text("toggle_airplane_mode")
    expect(device.locator(".device-result")).to_contain_text("Airplane Mode is now OFF.")
    expect(page.locator(".transcript")).to_contain_text("Done, it is off.")
    assert page.errors == []


# What each kind's view must show: (a selector in the detail view, text it contains).
KIND_MARKS = {
    "trajectory": (".transcript details.tool-call summary", "get_weather"),
    "rollout": (".block:has(h3:text('reward components'))", "precision"),
    "rl_sample": ("table.tools", "distractor"),
    "task": (".path", "list_tables→describe_table→read_query"),
    "tool_chain": (".path", "list_tables→describe_table→read_query"),
    "tool_graph": (".block:has(h3:text('edges')) table", "describe_table"),
    "tool_server": ("table.tools", "SELECT SQL query to execute"),
    "qa_instance": ("ul.tree ul.tree", "What is the population of Oslo?"),
    "environment": ("pre.code .tok-keyword >> nth=0", "def"),
    "eval_result": (".block:has(h3:text('checker details'))", "state mismatch in GorillaFileSystem"),
    "plan": ("details.revision", "Quantities were not checked against stock."),
}


def test_every_kind_has_its_own_view(browser, tmp_path):
    examples = write_lines(tmp_path / "examples.jsonl", *(example(kind) for kind in KINDS))
    page = shots.open_report(browser, report(tmp_path, examples))
    for index, kind in enumerate(KINDS):
        page.evaluate(f"location.hash = '#/entry/{index}'")
        expect(page.locator(".heading .badge.kind")).to_have_text(kind)
        selector, text = KIND_MARKS[kind]
        mark = page.locator(f"#detail {selector}").first
        if "→" in text:  # the chain is drawn as steps with arrows between them
            expect(mark).to_have_text(text.replace("→", " → "))
        else:
            expect(mark).to_contain_text(text)
    assert page.errors == []


@pytest.mark.parametrize("odd", ["<b>x</b>", 7, None, [1, "a"], [None, [None]], {"k": []}], ids=repr)
def test_fields_of_unexpected_types_never_break_a_view(browser, tmp_path, odd):
    broken = [{**example(kind), **{k: odd for k in example(kind) if k != "id"}} for kind in KINDS]
    page = shots.open_report(browser, report(tmp_path, write_lines(tmp_path / "odd.jsonl", *broken)))
    for index in range(len(KINDS)):
        page.evaluate(f"location.hash = '#/entry/{index}'")
        expect(page.locator(".heading .where")).to_have_text(f"{tmp_path / 'odd.jsonl'}:{index + 1}")
        expect(page.locator("#detail details.raw")).to_have_count(1)
        assert page.locator("#detail .warning", has_text="could not draw").count() == 0, KINDS[index]
    assert page.errors == []


def test_verdicts_judge_errors_and_the_eval_item_link(browser, tmp_path):
    verified = trajectory("bfcl/multi_turn_base/multi_turn_base_0/0", scores={
        "overall": None, "FA": None, "judge_errors": {"FA": "reply was not JSON"},
        "details": {"QU": {"score": 1, "reason": "clear question"}}, "QU": 1},
        verification={"verdict": "FAIL", "rationale": "the order was never placed", "attribution": "TRAJECTORY"})
    path = write_lines(tmp_path / "mixed.jsonl", verified, example("eval_result"))
    page = shots.open_report(browser, report(tmp_path, path), "/entry/0")
    expect(page.locator(".verdict .badge.bad")).to_have_text("FAIL")
    expect(page.locator(".verdict")).to_contain_text("attribution: TRAJECTORY")
    expect(page.locator("blockquote")).to_contain_text("the order was never placed")
    expect(page.locator("table.scores tr", has_text="FA").locator(".error")).to_have_text("reply was not JSON")
    expect(page.locator("table.scores tr", has_text="QU")).to_contain_text("clear question")
    page.evaluate("location.hash = '#/entry/1'")
    expect(page.locator(".heading .badge.kind")).to_have_text("eval_result")
    page.get_by_role("link", name=f"trajectory bfcl/multi_turn_base/multi_turn_base_0/0 ({path})").click()
    expect(page.locator(".heading .badge.kind")).to_have_text("trajectory")
    assert page.errors == []


def test_environment_code_is_highlighted_its_checks_question_and_parts_shown(browser, tmp_path):
    page = shots.open_report(browser, report(tmp_path, write_lines(tmp_path / "e.jsonl", example("environment"))),
                             "/entry/0")
    code = page.locator("pre.code").first  # the module's code; each part's own is folded in the parts table
    expect(code).to_contain_text("def get_capital(country):")
    assert code.locator(".tok-keyword").all_inner_texts()[:2] == ["def", "return"]
    assert "'norway'" in code.locator(".tok-string").all_inner_texts()
    expect(page.locator("table.calls .badge.good")).to_have_count(2)
    # what build-env keeps of the instance, and the parts merge groups (they were a JSON dump under "other fields")
    expect(page.locator("blockquote.question")).to_have_text("What is the population of the capital of Norway?")
    expect(page.locator("ul.tree ul.tree")).to_contain_text("What is the population of Oslo? → 709,000")
    expect(page.locator("table.parts tbody tr")).to_have_count(2)
    expect(page.locator("table.parts tbody tr").nth(1)).to_contain_text("get_population")
    assert page.get_by_text("other fields").count() == 0


def test_hostile_content_is_shown_as_text_and_never_runs(browser, tmp_path):
    hostile = '<img src=x onerror=alert(1)></script><script>alert(2)</script>'
    record = trajectory(hostile, messages=[{"role": "user", "content": hostile}])
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(report(tmp_path, write_lines(tmp_path / "t.jsonl", record)).resolve().as_uri() + "#/entry/0")
    expect(page.locator(".transcript .role-user")).to_contain_text(hostile)
    expect(page.locator(".heading .id")).to_have_text(hostile)
    assert page.locator("img").count() == 0
    assert page.locator("script").count() == 2
    assert dialogs == []


def test_a_5mb_string_is_truncated_until_asked_for(browser, tmp_path):
    record = trajectory("huge", messages=[{"role": "user", "content": "x" * 5_000_000}])
    path = report(tmp_path, write_lines(tmp_path / "t.jsonl", record))
    started = time.monotonic()
    page = shots.open_report(browser, path, "/entry/0")
    text = page.locator(".transcript .role-user .text")
    expect(text).to_be_visible()
    assert time.monotonic() - started < 20
    assert len(text.inner_text()) == 20_000
    page.get_by_role("button", name="show all (5,000,000 characters)").click()
    assert page.evaluate("document.querySelector('.transcript .role-user .text').textContent.length") == 5_000_000


def test_filters_sorting_and_the_compare_view(browser, tmp_path):
    sft = write_lines(tmp_path / "sft.jsonl", trajectory("t-1"), trajectory("t-2", scores={"overall": 0.25}))
    rl = write_lines(tmp_path / "rl.jsonl", trajectory("t-1", messages=[{"role": "user", "content": "RL version"}]),
                     "{not json")
    page = shots.open_report(browser, report(tmp_path, sft, rl))
    rows = page.locator("#entries tbody tr")
    expect(rows).to_have_count(4)

    page.fill("#f-max", "0.5")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("t-2")
    page.fill("#f-max", "")
    page.fill("#f-search", "rl version")
    expect(rows).to_have_count(1)
    page.fill("#f-search", "")
    page.select_option("#f-kind", "invalid")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("invalid JSON")
    page.select_option("#f-kind", "")
    page.check("#f-multi")
    expect(rows).to_have_count(2)
    page.uncheck("#f-multi")

    page.click("th[data-key=reward]")  # ascending, missing values last
    assert rows.nth(0).locator("td").nth(3).inner_text() == "t-2"
    assert rows.nth(3).locator("td").nth(2).inner_text() == "invalid"

    rows.nth(1).locator("a.compare-link").click()
    columns = page.locator(".compare .column")
    expect(columns).to_have_count(2)
    expect(columns.nth(0).locator(".heading .where")).to_have_text(f"{sft}:1")
    expect(columns.nth(1).locator(".heading .where")).to_have_text(f"{rl}:1")
    expect(columns.nth(1).locator(".transcript")).to_contain_text("RL version")
    assert page.errors == []


def test_the_served_page_fetches_its_records(browser, tmp_path):
    stdin = io.BytesIO("".join(json.dumps(example(kind)) + "\n" for kind in KINDS).encode())
    index = Index(["-"], stdin=stdin)
    server = make_server(index, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        expect(page.locator("#status")).to_contain_text(f"{len(KINDS)} records")
        expect(page.locator("#entries tbody tr")).to_have_count(len(KINDS))
        page.locator("#entries tbody tr", has_text="traj-81b0-0").click()
        expect(page.locator(".transcript details.tool-call summary")).to_contain_text("get_weather")
        expect(page.locator(".heading .where")).to_have_text(f"<stdin>:{KINDS.index('trajectory') + 1}")
        assert errors == []
    finally:
        server.shutdown()
        server.server_close()
        index.close()
