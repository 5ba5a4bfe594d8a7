"""Whether a tool's arguments bind to its parameters. Standard library only.

`inspect.signature(...).bind` names exactly what is wrong, but builds a Signature on every call,
which costs more than the rest of a call together in a freshly forked episode. Plain functions
given a fitting set of keyword arguments (what nearly every call is) are told apart from their
code object alone; anything else still goes through inspect, so every error reads as before.
"""

from __future__ import annotations

import inspect
import types

CO_VARKEYWORDS = inspect.CO_VARKEYWORDS


def check_arguments(function: types.FunctionType, arguments: dict) -> None:
    """Raise TypeError, worded as `inspect.Signature.bind`'s, if `function(**arguments)` does not bind."""
    if not _certainly_binds(function, arguments):
        inspect.signature(function).bind(**arguments)


def _certainly_binds(function: types.FunctionType, arguments: dict) -> bool:
    """True if the arguments fit a plain function's parameters; False if unsure (inspect decides)."""
    code = function.__code__
    if code.co_posonlyargcount or "__wrapped__" in vars(function) or "__signature__" in vars(function):
        return False  # inspect follows __wrapped__ and __signature__ instead of the code
    positional = code.co_argcount
    names = code.co_varnames[:positional + code.co_kwonlyargcount]
    if not code.co_flags & CO_VARKEYWORDS and not arguments.keys() <= set(names):
        return False
    required = names[:positional - len(function.__defaults__ or ())]
    keyword_defaults = function.__kwdefaults__ or {}
    return (all(name in arguments for name in required)
            and all(name in arguments or name in keyword_defaults for name in names[positional:]))
