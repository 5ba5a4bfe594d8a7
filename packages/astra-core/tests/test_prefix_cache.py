"""The embedded server's prefix cache on the real SmolLM2: a prompt that extends an earlier one reads only
its new tokens, and every reply is the one a cold cache gives (greedy, plain and schema-guided)."""

import pytest
from astra_core.local.generation import GenerationJob, Generator, GuidedCall, GuidedJson, Sampling
from astra_core.local.prefix_cache import PrefixCache, _common_prefix

pytestmark = pytest.mark.llm

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city", "days"]}}}
VERDICT = {"type": "object", "properties": {"verdict": {"enum": ["PASS", "FAIL"]}, "reason": {"type": "string"}},
           "required": ["verdict", "reason"]}


@pytest.fixture(scope="module")
def smollm2():
    from astra_core.local.model import load_model

    return load_model()


def conversation(tokenizer, turns: int) -> str:
    messages = [{"role": "system", "content": "You are a helpful travel assistant. Answer briefly."}]
    for k in range(turns):
        messages.append({"role": "user", "content": f"Question {k}: what is a good city to visit in spring?"})
        if k < turns - 1:
            messages.append({"role": "assistant", "content": f"Answer {k}: Kyoto, for its blossoms."})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def replies(generator: Generator, jobs: list[GenerationJob]) -> list[str]:
    return [generator.submit(job).result(timeout=300)[0].text for job in jobs]


def test_later_turns_reuse_the_earlier_prompt_and_reply_exactly_as_a_cold_cache(smollm2):
    model, tokenizer = smollm2
    prompts = [conversation(tokenizer, turns) for turns in (1, 2, 3)]

    def jobs():
        made = [GenerationJob(tokenizer.encode(p, add_special_tokens=False), 12, Sampling(temperature=0))
                for p in prompts]
        made.append(GenerationJob([], 24, Sampling(temperature=0), guided=GuidedJson(prompts[2], VERDICT)))
        made.append(GenerationJob([], 24, Sampling(temperature=0), guided=GuidedCall(prompts[2], [WEATHER])))
        return made

    cached, cold = Generator(model, tokenizer), Generator(model, tokenizer, prefix_cache_tokens=0)
    assert cold.prefix_cache is None
    with_cache = replies(cached, jobs())
    assert with_cache == replies(cold, jobs())
    cache = cached.prefix_cache
    lengths = [len(tokenizer.encode(p, add_special_tokens=False)) for p in prompts]
    assert cache.hits == 4  # turns 2 and 3, and both guided replies over turn 3's prompt
    # Turn 3 and the two guided replies read only what turn 2 (then turn 3) had not: far fewer tokens than their prompts.
    assert cache.read_tokens < lengths[0] + (lengths[2] - lengths[0]) + 2 * 2
    assert cache.reused_tokens >= lengths[0] - 1 + lengths[1] - 1 + 2 * (lengths[2] - 1) - 50


def test_the_budget_evicts_the_least_recently_used_prompts(smollm2):
    model, tokenizer = smollm2
    cache = PrefixCache(model, max_tokens=40)
    first, second = list(range(100, 125)), list(range(200, 225))
    cache.prefill(first)
    cache.prefill(second)  # 50 tokens > 40: the first goes
    assert [len(key) for key in cache._entries] == [25]
    cache.prefill(second[:20] + [7, 8])
    assert cache.hits == 1 and cache.reused_tokens == 20
    cache.prefill(list(range(300, 360)))  # longer than the whole budget: read, never kept
    assert all(len(key) <= 40 for key in cache._entries)


@pytest.mark.parametrize(("a", "b", "limit", "shared"), [
    ((1, 2, 3), [1, 2, 3, 4], 3, 3), ((1, 2, 3), [1, 2, 3], 2, 2), ((1, 2, 3, 4, 5), [1, 2, 9, 4, 5], 4, 2),
    ((5,), [6, 5], 1, 0), ((), [1], 0, 0), (tuple(range(1000)), list(range(700)) + [0], 700, 700),
])
def test_common_prefix(a, b, limit, shared):
    assert _common_prefix(a, b, limit) == shared


def reference_scores(model, tokenizer, prompt_ids, written, options):
    """Each option's mean log-probability read from scratch: prompt + written + option in one forward."""
    import torch

    written_ids = tokenizer.encode(written, add_special_tokens=False)
    scores = []
    for option in options:
        ids = tokenizer.encode(option, add_special_tokens=False)
        full = prompt_ids + written_ids + ids
        with torch.inference_mode():
            logits = model(torch.tensor([full])).logits[0].float()
        logp = torch.log_softmax(logits[len(full) - len(ids) - 1:-1], dim=-1)
        scores.append(float(logp[torch.arange(len(ids)), torch.tensor(ids)].sum()) / len(ids))
    return scores


@pytest.mark.parametrize("croppable", [True, False])
def test_the_writer_reads_what_it_wrote_once_and_scores_every_option_as_from_scratch(smollm2, croppable, monkeypatch):
    """The guided writer keeps what it has read (prompt, then written text) and scores a choice's options in one
    batch; a cache that cannot be cropped (sliding-window attention) is read again from the prompt's. Either
    way the scores are those of reading prompt + written + option from scratch, for options of any length and
    more options than one batch holds."""
    from astra_core.local.guided import _Writer
    from transformers import DynamicCache

    model, tokenizer = smollm2
    if not croppable:
        monkeypatch.setattr(DynamicCache, "is_croppable", property(lambda self: False))
    writer = _Writer(model, tokenizer, conversation(tokenizer, 2), temperature=0.0, max_tokens=64)
    monkeypatch.setattr(writer, "OPTIONS_PER_FORWARD", 3)
    options = ['"Kyoto"', '"Paris"', "true", '"a city with a long name, far away"', "null"]
    for written in ('{"city": ', '{"city": "Lisbon", "sure": '):
        writer.text = written
        expected = reference_scores(model, tokenizer, writer.prompt_ids, written, options)
        assert writer.scores(options) == pytest.approx(expected, abs=2e-3)
    if croppable:  # the second read continued the first: only the new written tokens were read
        assert writer.read_so_far.hits == 2
