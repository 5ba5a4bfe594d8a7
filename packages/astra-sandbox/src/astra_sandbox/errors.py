"""Errors raised by astra-sandbox (tool failures are never raised: they are ToolResults)."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the code inside it)."""


class SandboxUnavailable(SandboxError):
    """The jail cannot run on this machine; the message names the fix."""


class WorkerLost(SandboxError):
    """A sandbox worker stopped answering or exited; it is replaced."""
