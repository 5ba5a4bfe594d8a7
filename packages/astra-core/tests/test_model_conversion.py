"""The cached checkpoint of the bundled model computes what the GGUF computes."""

import pytest

pytestmark = pytest.mark.slow


def test_converted_checkpoint_matches_gguf_logits():
    import torch
    from astra_core.local.model import bundled_gguf, load_model
    from transformers import AutoModelForCausalLM

    gguf = bundled_gguf()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name).eval()
    model, tokenizer = load_model()
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-5)
