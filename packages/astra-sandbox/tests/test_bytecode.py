"""Episodes start from bytecode the supervisor compiled once per environment: the same module as
compiling the code in the episode, and code that does not compile still reports why from the episode."""

import json
import warnings

from astra_sandbox.inside import environment
from astra_sandbox.inside.environment import (
    MAX_COMPILED_SOURCE,
    call_tool,
    environment_bytecode,
    load_environment,
)
from astra_sandbox.inside.zygote import Zygote

CODE = '''
import json
RATES = {"EUR": 0.9}

def convert(amount: float, currency: str = "EUR") -> dict:
    """Convert US dollars."""
    return {"amount": round(amount * RATES[currency], 2), "line": convert.__code__.co_firstlineno}

def fail():
    raise ValueError("no")
'''
LIMIT = 10_000


def loaded(code: str | None, bytecode: str | None):
    module, reply = load_environment(code, LIMIT, bytecode)
    assert reply["ok"], reply
    return module, reply


def test_bytecode_loads_the_same_environment_as_the_code():
    from_code, code_reply = loaded(CODE, None)
    from_bytecode, bytecode_reply = loaded(None, environment_bytecode(CODE))
    assert bytecode_reply == code_reply
    for name, arguments in (("convert", {"amount": 10}), ("fail", {}), ("convert", {"amount": "x"})):
        message = {"name": name, "arguments": arguments}
        assert call_tool(from_bytecode, message, LIMIT) == call_tool(from_code, message, LIMIT)
    # compiled alike: file name, line numbers, and the annotations the episode's own compile gives them
    assert from_bytecode.convert.__code__.co_filename == from_code.convert.__code__.co_filename == "environment.py"
    assert from_bytecode.convert.__annotations__ == from_code.convert.__annotations__
    assert from_bytecode.convert.__doc__ == "Convert US dollars."


def test_annotations_are_evaluated_as_python_does():
    module, _ = loaded("def convert(amount: float) -> dict:\n    return {}\n", None)
    assert module.convert.__annotations__ == {"amount": float, "return": dict}  # not the strings 'float', 'dict'
    _, reply = load_environment("def tool(x: Undefined):\n    return x\n", LIMIT, None)
    assert reply["kind"] == "load_error" and "NameError" in reply["error"]  # as `import environment` fails


def test_code_that_does_not_compile_is_left_to_the_episode():
    assert environment_bytecode("def broken(:\n    pass") is None
    assert environment_bytecode("x = 1\0") is None  # a NUL byte: ValueError, not SyntaxError
    assert environment_bytecode("x = 1\n" + "#" * MAX_COMPILED_SOURCE) is None  # too big to compile here
    _, reply = load_environment("def broken(:\n    pass", LIMIT, None)
    assert reply["kind"] == "load_error" and "SyntaxError" in reply["error"]


def test_compile_warnings_do_not_reach_the_supervisors_output():
    environment_bytecode.cache_clear()
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert environment_bytecode('PATTERN = "\\d+"\n') is not None  # an invalid escape: a SyntaxWarning
    assert shown == []  # (in the jail they would go to the worker's log; an episode's go nowhere)


def test_the_supervisor_sends_bytecode_and_the_code_only_when_it_does_not_compile():
    limits = {"max_output_bytes": LIMIT}
    job = Zygote.job({"code": CODE, "limits": limits}, others=0)
    assert "code" not in job and job["bytecode"] == environment_bytecode(CODE)
    json.dumps(job)  # it travels as a JSON frame
    broken = Zygote.job({"code": "def broken(:", "limits": limits}, others=0)
    assert broken == {"mode": "environment", "code": "def broken(:", "limits": limits, "others": 0}


def test_each_environment_is_compiled_once(monkeypatch):
    environment_bytecode.cache_clear()
    compiled = []
    real = environment.compile_environment
    monkeypatch.setattr(environment, "compile_environment", lambda code: compiled.append(code) or real(code))
    for _ in range(3):
        environment_bytecode(CODE)
    assert compiled == [CODE]
