"""check_arguments decides and words every case as inspect.Signature.bind does."""

import functools
import inspect

import pytest
from astra_sandbox.inside.binding import check_arguments


def plain(a, b=1): ...
def keyword_only(a, *, b, c=2): ...
def open_ended(a, **extra): ...
def star_args(a, *rest): ...
def positional_only(a, /, b): ...
def no_parameters(): ...


@functools.wraps(plain)
def wrapped(*args, **kwargs): ...


def with_signature(x): ...


with_signature.__signature__ = inspect.signature(plain)

FUNCTIONS = [plain, keyword_only, open_ended, star_args, positional_only, no_parameters, wrapped, with_signature]
ARGUMENTS = [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}, {"a": 1, "c": 3}, {"a": 1, "b": 2, "c": 3},
             {"rest": 1, "a": 1}, {"extra": 1, "a": 1}, {"x": 1}, {"zzz": 0}]


def outcome(call):
    try:
        call()
    except TypeError as exc:
        return str(exc)
    return "binds"


@pytest.mark.parametrize("function", FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("arguments", ARGUMENTS, ids=str)
def test_same_as_inspect(function, arguments):
    expected = outcome(lambda: inspect.signature(function).bind(**arguments))
    assert outcome(lambda: check_arguments(function, arguments)) == expected
