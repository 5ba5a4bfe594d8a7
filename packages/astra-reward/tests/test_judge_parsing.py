"""Reading judge values: scales, lenient numbers, per-item lists. No model involved."""

import pytest
from astra_reward.judges.asking import InvalidScore, Reply, item_errors, item_scores, score_on, scored_field
from astra_reward.judges.prompts import BINARY, RATINGS, THREE_LEVELS


@pytest.mark.parametrize("value, scale, expected", [
    (1, THREE_LEVELS, 1.0), (0.5, THREE_LEVELS, 0.5), ("0.5", THREE_LEVELS, 0.5), (" 1 ", BINARY, 1.0),
    (4, RATINGS, 4.0), (4.0, RATINGS, 4.0),
])
def test_scores_on_the_scale_are_read(value, scale, expected):
    assert score_on(value, scale) == expected


@pytest.mark.parametrize("value, scale", [
    (0.7, THREE_LEVELS), (2, THREE_LEVELS), (-1, BINARY), (0.5, BINARY), (True, BINARY), (None, BINARY),
    ("high", BINARY), (float("nan"), BINARY), (float("inf"), RATINGS), (0, RATINGS), (6, RATINGS), (4.5, RATINGS),
    ([1], BINARY), ({"score": 1}, BINARY),
])
def test_values_off_the_scale_are_invalid_never_clamped_or_rounded(value, scale):
    with pytest.raises(InvalidScore):
        score_on(value, scale)


def test_scored_field_reads_objects_bare_numbers_and_reports_problems():
    reply = Reply({"a": {"reason": "ok", "score": 5}, "b": 3, "c": {"score": 9}}, None, "")
    assert scored_field(reply, "a", RATINGS) == (5.0, "ok", None)
    assert scored_field(reply, "b", RATINGS) == (3.0, None, None)
    assert scored_field(reply, "c", RATINGS)[2] == "score 9 is not one of 1, 2, 3, 4, 5"
    assert scored_field(reply, "d", RATINGS)[2] == "no 'd' in the reply"
    assert scored_field(Reply(None, "unparseable reply: x", "x"), "a", RATINGS) == (None, None, "unparseable reply: x")


def test_item_scores_first_entry_wins_unknown_ids_ignored_missing_named():
    reply = Reply({"items": [{"id": 1, "score": 1}, {"id": "1", "score": 0}, {"id": 7, "score": 1},
                             {"id": 2, "score": 3}, "junk"]}, "reply does not match the schema", "")
    scores, reasons, problems = item_scores(reply, "items", "id", ["1", "2", "3"], BINARY)
    assert scores == {"1": 1.0}
    assert problems["2"] == "score 3 is not one of 0, 1"
    assert item_errors(["1", "2", "3"], scores, problems, "sub-question") == [
        "sub-question 2: score 3 is not one of 0, 1",
        "no score for sub-question 3 (reply does not match the schema)"]
    assert item_errors(["1"], scores, problems, "x") == []
    bare_list = Reply([{"id": 1, "score": 0}], None, "")
    assert item_scores(bare_list, "items", "id", ["1"], BINARY)[0] == {"1": 0.0}
    assert item_scores(Reply({"other": 1}, None, ""), "items", "id", ["1"], BINARY)[2] == {
        "reply": "no 'items' list in the reply"}
