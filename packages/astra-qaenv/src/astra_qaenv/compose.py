"""Sub-environments and their composition into one environment module.

A sub-environment is one tool: `{"tool": <OpenAI spec>, "impl": <function name in its code>,
"code": <module source>, "source": {"kind": "lookup"|"llm", ...}, "calls": [<call>, ...]}`, where
each call is `{"sub_id", "tool", "arguments", "expected"}`: the sub-questions the tool answers.

Composition puts all sub-environments into one module. Code whose top-level names are new is
appended as is; code that would clash with names already defined (two generated tools that both
keep a `DATA` table, or two tools of the same name), or that imports from `__future__` after the
first part, runs in a namespace of its own and only its tool function is bound at top level, under
the tool's exposed name.
"""

from __future__ import annotations

import ast
import copy

from astra_qaenv.verify import Call


def tool_name(subenv: dict) -> str:
    return subenv["tool"]["function"]["name"]


def top_level_names(code: str) -> set[str]:
    """The names a module binds at its top level, also inside its top-level if/try/with/for/while blocks (a
    `try: DATA = load() except ...: DATA = {}` binds DATA as surely as a plain assignment)."""
    return _bound(ast.parse(code).body)


def _bound(statements: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
            continue
        for target in _targets(node):
            names |= {name.id for name in ast.walk(target) if isinstance(name, ast.Name)}
        for block in ("body", "orelse", "finalbody"):  # the blocks of if/for/while/with/try
            names |= _bound(getattr(node, block, []))
        for handler in getattr(node, "handlers", []):
            names |= _bound(handler.body) | ({handler.name} if handler.name else set())
    return names


def _imports_from_future(statements: list[ast.stmt]) -> bool:
    """Whether a module has a `from __future__ import ...` statement (which must open its module)."""
    return any(isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in statements)


def _targets(node: ast.stmt) -> list[ast.expr]:
    """What an assignment, a for loop or a with statement binds."""
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
        return [node.target]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []


def unique_names(subenvs: list[dict]) -> list[dict]:
    """Copies whose exposed tool names are unique: a repeated name gets a `_2`, `_3`... suffix."""
    out, taken = [], set()
    for subenv in subenvs:
        subenv = copy.deepcopy(subenv)
        base = subenv.setdefault("base_name", tool_name(subenv))
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        subenv["tool"]["function"]["name"] = name
        for call in subenv["calls"]:
            call["tool"] = name
        out.append(subenv)
    return out


def compose_module(subenvs: list[dict]) -> str:
    """One Python module exposing every sub-environment's tool under its exposed name."""
    parts: list[str] = []
    defined: set[str] = set()
    for index, subenv in enumerate(subenvs, start=1):
        code, impl, exposed = subenv["code"].strip() + "\n", subenv["impl"], tool_name(subenv)
        statements = ast.parse(code).body
        names = _bound(statements)
        # a future import is valid only at the top of a module: anywhere but first, the code gets its own
        if impl == exposed and not names & defined and not (parts and _imports_from_future(statements)):
            parts.append(code)
            defined |= names
            continue
        namespace = f"_subenv_{index}"
        # The namespace shares the module's __name__, so its functions count as the module's own tools.
        parts.append(f"{namespace} = {{'__name__': __name__}}\n"
                     f"exec(compile({code!r}, '<sub-environment {index}: {exposed}>', 'exec', dont_inherit=True), "
                     f"{namespace})\n"
                     f"{exposed} = {namespace}[{impl!r}]\n")
        defined |= {namespace, exposed}
    return "\n\n".join(parts)


def calls_of(subenvs: list[dict]) -> list[Call]:
    return [Call(c["sub_id"], c["tool"], c["arguments"], c["expected"]) for s in subenvs for c in s["calls"]]
