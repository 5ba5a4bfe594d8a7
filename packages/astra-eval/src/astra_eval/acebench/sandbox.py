"""A task's live app instances: executing calls on them and snapshotting what ACEBench scores."""

from __future__ import annotations

import ast
import copy
import json
import re
from typing import Any

from astra_eval.acebench.envs import CLASSES, SAVED_ATTRIBUTES

Call = tuple[str, dict]


class Sandbox:
    def __init__(self, involved_classes: list[str], initial_config: dict, lang: str):
        self.instances: dict[str, Any] = {}
        for name in involved_classes:
            instance = CLASSES[lang][name](lang)
            instance._load_scenario(copy.deepcopy(initial_config.get(name, {})))
            instance._load_scenario(copy.deepcopy(initial_config.get("BaseApi", {})))  # every app is on the phone
            self.instances[name] = instance
        self.executed = False  # ACEBench records final states only once something was sent to execution

    def _methods(self, name: str) -> list:
        if name.startswith("_"):
            return []
        return [getattr(instance, name) for instance in self.instances.values()
                if callable(getattr(instance, name, None))]

    def execute(self, calls: list[Call]) -> list[str]:
        """Run each call on every instance that has the method; the result is the last one's, as a string."""
        self.executed = True
        results = []
        for name, arguments in calls:
            methods = self._methods(name)
            try:
                if not methods:
                    raise NameError(f"name '{name}' is not defined")
                for method in methods:
                    result = method(**arguments)
            except Exception as exc:  # noqa: BLE001 - the model sees the error, as in ACEBench
                results.append(f"Error during execution: {exc}")
                continue
            results.append(_as_text(result))
        return results

    def snapshot(self) -> list[dict]:
        """The saved attributes of every instance, as ACEBench stores them (JSON: integer keys become strings)."""
        if not self.executed:
            return []
        states = [{name: {attr: getattr(instance, attr) for attr in SAVED_ATTRIBUTES[name]}}
                  for name, instance in self.instances.items()]
        return json.loads(json.dumps(states, ensure_ascii=False))


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


# -- ACEBench's text format for calls: [ApiName(key='value', ...), ...] ------------------------------

CALL_TEXT = re.compile(r"\[.*\]", re.DOTALL)


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Name):  # a bare word is taken as its text
        return node.id
    if isinstance(node, ast.Call):
        return ast.unparse(node)
    return ast.literal_eval(node)


def parse_calls(text: str) -> list[Call]:
    """'[f(a=1), g(b="x")]' -> [("f", {"a": 1}), ("g", {"b": "x"})]; raises ValueError if it is not only calls.
    Keyword arguments only (positional ones are ignored, as ACEBench's decoder does)."""
    body = text.strip().strip("[]'")
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a call list: {exc}") from None
    nodes = tree.elts if isinstance(tree, ast.Tuple | ast.List) else [tree]
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            raise ValueError("not a call list: an element is not a function call")
        name = ast.unparse(node.func)
        try:
            calls.append((name, {kw.arg: _value(kw.value) for kw in node.keywords}))
        except ValueError as exc:
            raise ValueError(f"unsupported argument in {name}: {exc}") from None
    return calls


def call_text(calls: list[Call]) -> str:
    """Calls in ACEBench's text format, as its milestones are written: [f(a=1, b='x')]."""
    rendered = [f"{name}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})"
                for name, arguments in calls]
    return "[" + ", ".join(rendered) + "]"
