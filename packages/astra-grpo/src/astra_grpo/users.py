"""The user simulator of interactive samples (AReaL-SEA §5): an endpoint from the config or the environment.
Torch-free, so that commands which only talk to the simulator (`astra-grpo tau2-samples`) start quickly."""

from __future__ import annotations

import os

from astra_core.llm import LLMConfig
from astra_core.users import UserSimulator

from astra_grpo.config import GRPOConfig


def make_user_simulator(config: GRPOConfig, samples: list[dict] | None):
    """The user simulator (astra_core.users) when some sample is interactive (has a `user`), else None.
    samples=None (streamed samples): one when an endpoint is configured, else None. Its endpoint, model
    and API key come from the config, then ASTRA_USER_LLM_*, then the policy endpoint's ASTRA_LLM_*."""
    if samples is not None and not any(sample.get("user") for sample in samples):
        return None

    def setting(name: str) -> str | None:
        return os.environ.get(f"ASTRA_USER_LLM_{name}") or os.environ.get(f"ASTRA_LLM_{name}") or None

    base_url = config.user_base_url or setting("BASE_URL")
    if not base_url:
        if samples is None:
            return None
        raise ValueError("samples have a user simulator (`user`) but no endpoint: set user_base_url "
                         "(--user-base-url) or ASTRA_USER_LLM_BASE_URL / ASTRA_LLM_BASE_URL")
    llm = LLMConfig(base_url=base_url, model=config.user_model or os.environ.get("ASTRA_USER_LLM_MODEL"),
                    api_key=setting("API_KEY"))
    return UserSimulator(llm, max_tokens=config.user_max_tokens)
