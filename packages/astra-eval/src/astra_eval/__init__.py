"""astra-eval: Benchmark adapters (BFCL v3 multi-turn, tau2-bench, ACEBench, AIME) scored by the benchmarks' own checkers."""

__version__ = "0.1.0"
