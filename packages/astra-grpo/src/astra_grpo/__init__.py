"""astra-grpo: From-scratch SFT and multi-turn GRPO trainers on accelerate/DeepSpeed for tool-using agents."""

__version__ = "0.1.0"
