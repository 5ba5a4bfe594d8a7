"""astra-qaenv: Decomposed Q-A instances -> sandbox-verified, code-executable tool environments -> RL samples with irrelevant-tool mixing."""

__version__ = "0.1.0"
