"""astra-sandbox: nsjail-isolated execution of untrusted generated code, stateful environment
sessions, a warm worker pool.

    from astra_sandbox import SandboxConfig, run_code, SessionPool, ToolResult, open_session
"""

from astra_sandbox.config import SandboxConfig
from astra_sandbox.errors import SandboxError, SandboxUnavailable, WorkerLost
from astra_sandbox.pool import SessionPool
from astra_sandbox.run_code import run_code
from astra_sandbox.session import Session, ToolResult, open_session

__version__ = "0.1.0"

__all__ = ["SandboxConfig", "SandboxError", "SandboxUnavailable", "Session", "SessionPool", "ToolResult",
           "WorkerLost", "open_session", "run_code"]
