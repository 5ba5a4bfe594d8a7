"""Answer normalization and matching: what counts as "the answer appears in this text"."""

import pytest
from astra_reward.normalize import contains_answer, normalize_answer, tokens


@pytest.mark.parametrize("text, answer", [
    ("{\"population\": \"709,000\"}", "709,000"),
    ("{\"population\": 709000}", "709,000"),         # numeric form vs thousands separators
    ("population: 709\u202f000", "709000"),        # narrow no-break space as separator
    ("709_000 people", "709,000"),
    ("{\"capital\": \"Oslo\"}", "oslo"),              # case
    ("The capital is OSLO.", "Oslo"),               # punctuation around the answer
    ("price: 2.50 EUR", "2.5"),                      # trailing zeros of decimals
    ("total 709000.0", "709,000"),
    ("{\"city\": \"Z\\u00fcrich\"}", "Zürich"),       # JSON escapes
    ("Zurich", "Zürich"),                            # accents
    ("temperature: −3 °C", "-3"),                    # Unicode minus
    ("New  York\ncity", "new york"),                 # whitespace
    ("首都是北京。", "北京"),                          # CJK without spaces
    ("$1,200.00 due", "1200"),
    ("answer: yes!", "Yes"),
])
def test_answers_found_after_normalization(text, answer):
    assert contains_answer(text, answer)


@pytest.mark.parametrize("text, answer", [
    ("{\"count\": 10}", "1"),                        # short numbers are whole tokens
    ("value 1.5", "1"),
    ("date 2024-01-15", "1"),
    ("Oslofjord", "Oslo"),                           # no partial words
    ("temperature: 3 °C", "-3"),                     # the sign matters
    ("temperature: -3 °C", "3"),
    ("3,14", "314"),                                 # a decimal comma is not a thousands separator
    ("New York", "York New"),                        # order matters
    ("anything at all", "?!"),                       # an answer with no token never matches
    ("", "Oslo"),
])
def test_near_misses_do_not_match(text, answer):
    assert not contains_answer(text, answer)


def test_dates_split_into_parts():
    # "-" after a digit is a separator, not a sign: the day is a token of its own.
    assert contains_answer("date 2024-01-15", "15")
    assert contains_answer("date 2024-01-15", "2024-01-15")
    assert not contains_answer("date 2024-01-15", "2024-01-16")


def test_alternatives_any_of():
    assert contains_answer("it is 42", ["forty-two", "42"])
    assert not contains_answer("it is 43", ["forty-two", "42"])


def test_tokens_keep_decimals_versions_and_signs():
    assert tokens("v1.2.0 costs -3.50, ok.") == ["v1.2.0", "costs", "-3.5", "ok"]
    assert tokens("a-3") == ["a", "3"]
    assert tokens(None) == []
    assert normalize_answer(709000) == "709000"
    assert normalize_answer(True) == "true"
