"""astra-sandbox: nsjail-isolated execution of untrusted generated code, stateful environment sessions, a warm worker pool."""

__version__ = "0.1.0"
