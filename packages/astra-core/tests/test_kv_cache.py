"""The KV cache is passed under the name the model's `forward` takes: `cache` from transformers 5.24 on,
`past_key_values` before (and in remote-code models that still declare it). pytest's configuration turns
transformers' deprecation warning for the old name into an error, so a call with the wrong name fails."""

from astra_core.local.kv_cache import cache_argument, returned_cache


class NewStyle:
    def forward(self, input_ids, cache=None, use_cache=None):
        pass


class OldStyle:
    def forward(self, input_ids, past_key_values=None, use_cache=None):
        pass


class Wrapped:  # what DistributedDataParallel and a DeepSpeed engine look like from outside
    def __init__(self, module):
        self.module = module

    def forward(self, *inputs, **kwargs):
        pass


class Output:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def test_the_name_follows_the_models_forward_through_wrappers():
    held = object()
    assert cache_argument(NewStyle(), held) == {"cache": held}
    assert cache_argument(OldStyle(), held) == {"past_key_values": held}
    assert cache_argument(Wrapped(Wrapped(NewStyle())), held) == {"cache": held}
    assert cache_argument(Wrapped(OldStyle()), held) == {"past_key_values": held}


def test_the_returned_cache_is_read_under_either_name():
    held = object()
    assert returned_cache(Output(cache=held)) is held
    assert returned_cache(Output(past_key_values=held)) is held  # transformers before 5.24
    assert returned_cache(Output(cache=None, past_key_values=held)) is held


def test_the_installed_transformers_takes_the_cache_and_returns_it_extended():
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    model = LlamaForCausalLM(config).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        whole = model(ids).logits[0, -1]
        head = model(ids[:, :3], **cache_argument(model, DynamicCache(config=config)), use_cache=True)
        kv_cache = returned_cache(head)
        assert kv_cache.get_seq_length() == 3
        tail = model(ids[:, 3:], **cache_argument(model, kv_cache), use_cache=True)
    assert returned_cache(tail).get_seq_length() == 4
    assert torch.allclose(tail.logits[0, -1], whole, atol=1e-5)  # the cache was used, not ignored
