"""The name under which the installed transformers passes a model's KV cache.

transformers 5.24 renamed the `past_key_values` argument of `forward` and `generate`, and the output
field, to `cache`; the old argument is deprecated (a FutureWarning on every call) and leaves
`forward` in 5.40. Older versions know only `past_key_values`. Users get whichever transformers pip
resolves, so the name is read from the model's own `forward`: that also keeps remote-code models, which
define their own signature, on the name they accept.
"""

from __future__ import annotations

import inspect
from functools import cache


def cache_argument(model, kv_cache) -> dict:
    """`{name: kv_cache}` to pass to `model(...)` or `model.generate(...)`."""
    return {_argument_name(type(_unwrapped(model))): kv_cache}


def returned_cache(output):
    """The KV cache a forward returned (`output.cache`, or `output.past_key_values` before 5.24)."""
    kv_cache = getattr(output, "cache", None)
    return kv_cache if kv_cache is not None else output.past_key_values


def _unwrapped(model):
    while hasattr(model, "module"):  # DistributedDataParallel, a DeepSpeed engine
        model = model.module
    return model


@cache
def _argument_name(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"
