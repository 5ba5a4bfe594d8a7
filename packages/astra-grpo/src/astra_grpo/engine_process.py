"""Moved to `astra_grpo.engines.process` (kept for the benchmarks and callers of the old path)."""

from astra_grpo.engines.process import POLL_S, EngineError, EngineProcess

__all__ = ["POLL_S", "EngineError", "EngineProcess"]
