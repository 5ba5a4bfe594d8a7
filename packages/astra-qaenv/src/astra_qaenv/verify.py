"""Sandbox verification: run tool calls against environment code in astra-sandbox and check answers.

A call is verified when the tool's observation *contains* the expected sub-answer (paper §2.2.3:
"a sub-environment is considered successful if the execution result contains the target answer"),
matched exactly as the F1 reward will match it (`astra_reward.contains_answer`: normalized, whole
tokens), and not an error observation (`{"error": ...}` containing the answer verifies nothing).
"""

from __future__ import annotations

import ast
import sys
from contextlib import ExitStack
from dataclasses import dataclass, fields

from astra_core.config import knob
from astra_reward import contains_answer
from astra_reward.conversation import is_error_observation
from astra_sandbox import SandboxConfig


@dataclass
class Call:
    """One tool call to verify: which sub-question it answers and what its observation must contain."""

    sub_id: int | str | None
    tool: str
    arguments: dict
    expected: str


@dataclass
class CallCheck:
    call: Call
    ok: bool
    observation: str
    kind: str  # the sandbox's ToolResult.kind, "wrong_answer" (ran, lacks the answer) or "error_observation"
    error: str | None = None

    def reason(self) -> str:
        """Why the call failed, for reject reasons and retry logs."""
        where = f"sub-question {self.call.sub_id}: {self.call.tool}({_args(self.call.arguments)})"
        if self.kind == "wrong_answer":
            return f"{where} returned {_clip(self.observation)} which lacks the answer {self.call.expected!r}"
        return f"{where} failed ({self.kind}): {_clip(self.error or self.observation)}"

    def verified(self) -> dict:
        """The `verified_calls` entry of an environment record."""
        return {"sub_id": self.call.sub_id, "tool": self.call.tool, "arguments": self.call.arguments,
                "expected": self.call.expected, "observation": self.observation}


def _args(arguments: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


def _clip(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[:limit] + "…")


# -- static checks before anything runs ---------------------------------------------------------------

def static_problems(code: str, tool_names: list[str]) -> list[str]:
    """What is wrong with generated code before running it: syntax, missing functions, non-stdlib imports."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return [f"code does not parse: {exc.msg} (line {exc.lineno})"]
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    defined |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)}
    problems = [f"code defines no top-level function {name!r}" for name in tool_names if name not in defined]
    for module in sorted(imported_modules(tree)):
        if module not in sys.stdlib_module_names:
            problems.append(f"code imports {module!r}, which is not in the Python standard library")
    return problems


def imported_modules(tree: ast.AST) -> set[str]:
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module.split(".")[0])
    return modules


# -- running calls in the sandbox ------------------------------------------------------------------

@dataclass(frozen=True)
class VerifierConfig(SandboxConfig):
    """The sandbox limits of verification runs (every `--sandbox-...` flag) and the size of the warm pool."""

    pool_size: int = knob(2, "Warm sandbox workers verifying tool calls in parallel.", flag="sandbox-pool-size",
                          minimum=1)

    def sandbox(self) -> SandboxConfig:
        return SandboxConfig(**{f.name: getattr(self, f.name) for f in fields(SandboxConfig)})


class Verifier:
    """Runs calls against environment code in warm, isolated sandbox sessions (one session per check).

    Use as a context manager; `check` is thread-safe (the pool is), so async stages call it via
    `asyncio.to_thread`.
    """

    def __init__(self, config: VerifierConfig | None = None):
        self.config = config or VerifierConfig()
        self._stack = ExitStack()
        self._pool = None  # astra_sandbox.SessionPool while entered

    def __enter__(self) -> Verifier:
        from astra_sandbox import SessionPool

        self._pool = self._stack.enter_context(SessionPool(size=self.config.pool_size, config=self.config.sandbox()))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        self._pool = None

    def check(self, code: str, calls: list[Call]) -> list[CallCheck]:
        """Load `code` in a fresh session and run every call in order; one CallCheck per call."""
        assert self._pool is not None, "use Verifier as a context manager"
        results = []
        with self._pool.session(code, requirements=[]) as session:
            for call in calls:
                result = session.call(call.tool, call.arguments)
                if result.ok and is_error_observation(result.output):
                    results.append(CallCheck(call, False, result.output, "error_observation", result.output))
                elif result.ok and contains_answer(result.output, call.expected):
                    results.append(CallCheck(call, True, result.output, "ok"))
                elif result.ok:
                    results.append(CallCheck(call, False, result.output, "wrong_answer"))
                else:
                    results.append(CallCheck(call, False, result.output, result.kind, result.error))
        return results


def all_ok(checks: list[CallCheck]) -> bool:
    return bool(checks) and all(c.ok for c in checks)


def failures(checks: list[CallCheck]) -> str:
    return "; ".join(c.reason() for c in checks if not c.ok)
