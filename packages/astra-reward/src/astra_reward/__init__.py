"""astra-reward: Rewards for tool-use agents: F1 trajectory reward, state verifiers and LLM judges."""

__version__ = "0.1.0"
