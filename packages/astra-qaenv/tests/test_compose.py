"""compose_module: sub-environments in one module that Python compiles and runs, each tool bound."""

from astra_qaenv.compose import compose_module, top_level_names


def subenv(name: str, code: str) -> dict:
    return {"tool": {"type": "function", "function": {"name": name}}, "impl": name, "code": code}


def run(module: str) -> dict:
    namespace = {"__name__": "environment"}
    exec(compile(module, "environment.py", "exec", dont_inherit=True), namespace)  # noqa: S102 - test code
    return namespace


FIRST = subenv("first", "def first(x: int) -> int:\n    return 1\n")
# generated code often opens with `from __future__ import annotations`; only a module's first statement may
FUTURE = subenv("second", '"""Doc."""\nfrom __future__ import annotations\n\ndef second(x: Missing) -> str:\n'
                          "    return 'two'\n")


def test_a_later_sub_environment_with_a_future_import_gets_a_namespace_of_its_own():
    module = compose_module([FIRST, FUTURE])
    namespace = run(module)
    assert (namespace["first"](1), namespace["second"](2)) == (1, "two")
    assert module.startswith("def first")  # the first stays inline
    assert namespace["second"].__annotations__ == {"x": "Missing", "return": "str"}  # its own future applies


def test_a_future_import_first_stays_inline_and_is_not_inherited_by_the_namespaced_parts():
    module = compose_module([FUTURE, FIRST])
    assert module.startswith('"""Doc."""') and "exec(" not in module
    clash = run(compose_module([FUTURE, subenv("second", "def second(x: int) -> int:\n    return x\n")]))
    (own,) = [value for key, value in clash.items() if key.startswith("_subenv")]
    assert own["second"].__annotations__ == {"x": int, "return": int}  # compiled as a module of its own


def test_sub_environments_without_clashes_stay_inline():
    module = compose_module([subenv("a", "def a():\n    return 1\n"), subenv("b", "def b():\n    return 2\n")])
    assert "exec(" not in module


def test_names_bound_inside_top_level_blocks_count_as_clashes():
    # DATA is bound in a try block: the second tool's DATA must not replace it
    guarded = subenv("get_a", "try:\n    DATA = {'x': 1}\nexcept Exception:\n    DATA = {}\n\n"
                              "def get_a(key):\n    return DATA[key]\n")
    plain = subenv("get_b", "DATA = {'x': 2}\n\ndef get_b(key):\n    return DATA[key]\n")
    namespace = run(compose_module([guarded, plain]))
    assert (namespace["get_a"]("x"), namespace["get_b"]("x")) == (1, 2)
    assert top_level_names("if True:\n    import json as j\nfor i in []:\n    pass\nwith open(p) as fh:\n    W = 1\n"
                           "def f():\n    INNER = 1\n") == {"j", "i", "fh", "W", "f"}
