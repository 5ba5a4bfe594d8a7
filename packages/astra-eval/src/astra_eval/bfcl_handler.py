"""BFCL through bfcl-eval's own model handler for a family: the leaderboard's route.

`astra-eval run bfcl --handler NAME` builds the handler bfcl-eval's registry gives NAME (e.g.
`Qwen/Qwen3-8B-FC`: its Qwen FC handler, which writes the Qwen prompt itself from BFCL's raw function
docs, queries a *completions* endpoint, keeps reasoning in the history and drops `<tool_call>` blocks
it cannot parse) and lets it play each entry with its own `inference`, exactly as `bfcl generate`
does; the entry is then scored with bfcl-eval's checker after decoding every step with that handler's
own `decode_execute`, as `bfcl evaluate` does. The endpoint is given as bfcl-eval reads it:
$REMOTE_OPENAI_BASE_URL for local-model handlers (with their tokenizer, for the prompt length),
$OPENAI_BASE_URL for API handlers. An error while an entry runs fails it ("Error during inference").
"""

from __future__ import annotations

import asyncio
import copy
import os
import re
from collections import defaultdict
from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

from astra_eval.bfcl import entry_of, score, short_verdict
from astra_eval.results import eval_result

BFCL_GENERATE_TEMPERATURE = 0.001  # `bfcl generate`'s default


def build(name: str, *, base_url: str, api_key: str | None, temperature: float, tokenizer: str | None,
          model: str | None):
    """bfcl-eval's handler for registry name `name`, pointed at `base_url` (and ready: local-model
    handlers load their tokenizer and wait for the endpoint, as `bfcl generate --skip-server-setup`)."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
    from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler

    if name not in MODEL_CONFIG_MAPPING:
        import click

        raise click.BadParameter(f"bfcl-eval has no model {name!r} (`bfcl models` lists them)", param_hint="--handler")
    os.environ["OPENAI_BASE_URL"] = os.environ["REMOTE_OPENAI_BASE_URL"] = base_url
    os.environ["OPENAI_API_KEY"] = os.environ["REMOTE_OPENAI_API_KEY"] = api_key or "EMPTY"
    if tokenizer:
        os.environ["REMOTE_OPENAI_TOKENIZER_PATH"] = tokenizer
    config = MODEL_CONFIG_MAPPING[name]  # what `bfcl generate` builds its handler from (its registry entry)
    handler = config.model_handler(model_name=config.model_name, temperature=temperature, registry_name=name,
                                   is_fc_model=config.is_fc_model)
    if isinstance(handler, OSSHandler):
        handler.spin_up_local_server(num_gpus=1, gpu_memory_utilization=0.9, backend="vllm", skip_server_setup=True,
                                     local_model_path=None)
        if model:
            handler.model_path_or_id = model  # the endpoint's name for the model, if it differs from the handler's
    elif model:
        handler.model_name = model
    return handler


class HandlerRun:
    """`run_item` for the handler route: one entry played by the handler in a worker thread."""

    def __init__(self, handler):
        self.handler = handler
        self.locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def _instances_prefix(self, entry_id: str) -> str:
        # bfcl-eval keeps an entry's backend instances in a module global named after the model and entry.
        return re.sub(r"[-./:]", "_", f"{self.handler.model_name_underline_replaced}_{entry_id}_")

    def _play(self, entry: dict) -> tuple[list, dict]:
        prefix = self._instances_prefix(entry["id"])
        try:
            return self.handler.inference(copy.deepcopy(entry), False, True)
        finally:
            namespace = vars(multi_turn_utils)
            for key in [key for key in namespace if key.startswith(prefix)]:
                del namespace[key]

    async def __call__(self, item: dict) -> dict:
        entry, ground_truth = entry_of(item)
        async with self.locks[entry["id"]]:  # trials of one entry would share its backend instances
            turns, metadata = await asyncio.to_thread(self._play, entry)
        verdict = score(entry, ground_truth, turns, decode=self._decode)
        details: dict[str, Any] = {"checker": short_verdict(verdict), "model_result": turns,
                                   "handler": type(self.handler).__name__, "inference_log": metadata.get("inference_log")}
        if metadata.get("reasoning_content"):
            details["reasoning_content"] = metadata["reasoning_content"]
        return eval_result(item, success=verdict["valid"], score=1.0 if verdict["valid"] else 0.0, details=details)

    def _decode(self, step: Any) -> list[str]:
        return self.handler.decode_execute(step, has_tool_call_tag=False)
