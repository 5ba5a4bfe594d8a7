"""Shared test helpers: tiny random-init models, scripted engines, synthetic GRPO batches and a
plain per-token reference implementation of the objectives (loops, no batching tricks)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import torch
from astra_grpo.engines import Generation, Sampling
from astra_grpo.rollout import Episode, Group

# A Qwen2.5-style tool-aware chat template (our own text): tools listed in the system turn,
# <tool_call> blocks with dict arguments, tool results as <tool_response> user turns.
QWEN_STYLE_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "Call a function with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}\n<|im_start|>assistant\n{{ message.content or '' }}"
    "{%- for call in message.tool_calls or [] %}\n<tool_call>\n"
    "{\"name\": \"{{ call.function.name }}\", \"arguments\": {{ call.function.arguments | tojson }}}\n</tool_call>"
    "{%- endfor %}<|im_end|>"
    "{%- elif message.role == 'tool' %}\n<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>"
    "{%- elif message.role != 'system' %}\n<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}\n<|im_start|>assistant\n{% endif %}"
)


def tokenizer_dir() -> Path:
    from astra_core.local.model import default_model_dir

    return default_model_dir()


def load_tokenizer(template: str | None = None):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir())
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


def tiny_config(family: str = "llama", vocab_size: int = 49152, hidden: int = 64, seed_eos: int = 2):
    from transformers import LlamaConfig, Qwen3Config

    common = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                  tie_word_embeddings=True, eos_token_id=seed_eos, bos_token_id=1, pad_token_id=seed_eos)
    if family == "qwen":
        return Qwen3Config(head_dim=hidden // 4, **common)
    return LlamaConfig(**common)


def tiny_model(family: str = "llama", seed: int = 0, **kwargs):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, **kwargs), attn_implementation="sdpa")
    return model


def save_tiny_model(directory: Path, family: str = "llama") -> Path:
    tokenizer = load_tokenizer(QWEN_STYLE_TEMPLATE if family == "qwen" else None)
    tiny_model(family).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# -- rollouts --------------------------------------------------------------------------------------

class ScriptedEngine:
    """An engine whose replies are scripted from the prompt text (for control-flow tests): the
    reply text is tokenized and ended with the stop token, cut at the budget like a real engine."""

    def __init__(self, tokenizer, reply, stop_id: int):
        self.tokenizer = tokenizer
        self.reply = reply  # (prompt text) -> reply text
        self.stop_id = stop_id
        self.calls: list[list[int]] = []  # budgets of every generate call
        self.pushed = 0

    def generate(self, prompts, max_new_tokens, sampling: Sampling, keys=None):
        self.calls.append(list(max_new_tokens))
        out = []
        for prompt, budget in zip(prompts, max_new_tokens, strict=True):
            text = self.reply(self.tokenizer.decode(prompt))
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.stop_id]
            out.append(Generation(ids, True) if len(ids) <= budget else Generation(ids[:budget], False))
        return out

    def push_weights(self, model) -> None:
        self.pushed += 1

    def sleep(self) -> None:
        pass

    def wake(self) -> None:
        pass


def assistant_turns(prompt_text: str) -> int:
    return prompt_text.count("<|im_start|>assistant") - 1  # minus the generation prompt


# -- synthetic GRPO batches and the reference objective -------------------------------------------

def synthetic_groups(n_groups: int, group_size: int, vocab: int, seed: int = 0,
                     shared_prompt: bool = False) -> list[Group]:
    """Groups of multi-turn-looking episodes: a prompt, then generated spans separated by observations.
    `shared_prompt`: as in real GRPO groups, a group's episodes start with the same prompt (and now and then
    the same first reply), so a tree layout shares it."""
    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        sample = {"id": f"s{g}"}
        episodes = []
        if shared_prompt:
            common = [rng.randrange(3, vocab) for _ in range(rng.randint(3, 8))]
            first_reply = [rng.randrange(3, vocab) for _ in range(rng.randint(1, 4))]
        for member in range(group_size):
            prompt = len(common) if shared_prompt else rng.randint(3, 8)
            ids = list(common) if shared_prompt else [rng.randrange(3, vocab) for _ in range(prompt)]
            mask = [0] * prompt
            if shared_prompt and member % 2:
                ids += first_reply
                mask += [1] * len(first_reply)
            for _turn in range(rng.randint(1, 3)):
                generated = rng.randint(1, 6)
                ids += [rng.randrange(3, vocab) for _ in range(generated)]
                mask += [1] * generated
                observation = rng.randint(0, 4)
                ids += [rng.randrange(3, vocab) for _ in range(observation)]
                mask += [0] * observation
            episode = Episode(sample=sample, member=member, messages=[], token_ids=ids, loss_mask=mask,
                              prompt_length=prompt, reward=round(rng.random(), 3))
            episodes.append(episode)
        groups.append(Group(uid=f"s{g}@{g}", sample_id=f"s{g}", episodes=episodes))
    return groups


def reference_token_logprobs(model, ids: list[int], temperature: float = 1.0) -> list[torch.Tensor]:
    """log p(ids[t] | ids[:t]) for t >= 1, one sequence alone (no padding), position by position."""
    logits = model(input_ids=torch.tensor([ids])).logits[0].float() / temperature
    out = []
    for t in range(1, len(ids)):
        out.append(torch.log_softmax(logits[t - 1], dim=-1)[ids[t]])
    return out


def reference_grpo_loss(model, episodes: list[Episode], advantages: list[float], old: list[list[torch.Tensor]],
                        *, mode: str, eps_low: float, eps_high: float, ref: list[list[torch.Tensor]] | None = None,
                        kl_coef: float = 0.0, temperature: float = 1.0) -> torch.Tensor:
    """Eq. 32 (mode=token) or Eq. 23 (mode=sequence) with per-token loops."""
    per_sequence_sums, per_sequence_counts = [], []
    for index, episode in enumerate(episodes):
        logprobs = reference_token_logprobs(model, episode.token_ids, temperature)
        total, count = torch.zeros(()), 0
        for t in range(1, len(episode.token_ids)):
            if not episode.loss_mask[t]:
                continue
            ratio = torch.exp(logprobs[t - 1] - old[index][t - 1])
            advantage = advantages[index]
            term = -torch.minimum(ratio * advantage, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantage)
            if ref is not None and kl_coef:
                log_ratio = ref[index][t - 1] - logprobs[t - 1]
                term = term + kl_coef * (torch.exp(log_ratio) - log_ratio - 1)
            total = total + term
            count += 1
        per_sequence_sums.append(total)
        per_sequence_counts.append(count)
    if mode == "token":
        return sum(per_sequence_sums) / sum(per_sequence_counts)
    return sum(s / max(c, 1) for s, c in zip(per_sequence_sums, per_sequence_counts, strict=True)) / len(episodes)


def reference_grpo_updates(model, groups: list[Group], overrides: dict, lr: float = 1.0) -> torch.Tensor:
    """The trainer's SGD updates on `groups` (config `overrides`: loss_average, mini_batch_size,
    num_iterations, clip bounds, kl_coef against the initial model) with per-token loops over the whole
    global batch; the flat parameters."""
    group_size = len(groups[0].episodes)
    episodes = [e for g in groups for e in g.episodes]
    advantages = reference_advantages([e.reward for e in episodes], group_size)
    with torch.no_grad():
        old = [reference_token_logprobs(model, e.token_ids) for e in episodes]
    kl_coef = overrides.get("kl_coef", 0.0)
    mini = overrides.get("mini_batch_size", len(groups)) * group_size
    sgd = torch.optim.SGD(model.parameters(), lr=lr)
    for _pass in range(overrides.get("num_iterations", 1)):
        for start in range(0, len(episodes), mini):
            chosen = range(start, start + mini)
            sgd.zero_grad()
            reference_grpo_loss(model, [episodes[i] for i in chosen], [advantages[i] for i in chosen],
                                [old[i] for i in chosen], mode=overrides["loss_average"],
                                eps_low=overrides.get("clip_eps_low", 0.2),
                                eps_high=overrides.get("clip_eps_high", 0.2),
                                # the KL reference is the initial model: its log-probs are the old ones
                                ref=[old[i] for i in chosen] if kl_coef else None, kl_coef=kl_coef).backward()
            sgd.step()
    return flat_params(model)


def reference_advantages(rewards: list[float], group_size: int, eps: float = 1e-6) -> list[float]:
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))
        out += [(r - mean) / (std + eps) for r in group]
    return out


def reference_sft_loss(model, examples: list[tuple[list[int], list[int]]], mode: str = "token") -> torch.Tensor:
    sums, counts = [], []
    for ids, mask in examples:
        logprobs = reference_token_logprobs(model, ids)
        total, count = torch.zeros(()), 0
        for t in range(1, len(ids)):
            if mask[t]:
                total, count = total - logprobs[t - 1], count + 1
        sums.append(total)
        counts.append(count)
    if mode == "token":
        return sum(sums) / sum(counts)
    return sum(s / c for s, c in zip(sums, counts, strict=True)) / len(examples)


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])


# -- environments (run in the real, jailed astra-sandbox SessionPool) ------------------------------

ENV_CODE = '''
CAPITALS = {"norway": "Oslo", "france": "Paris"}
POPULATION = {"oslo": "709,000", "paris": "2,100,000"}
visits = 0

def get_capital(country):
    return {"capital": CAPITALS[country.lower()]}

def get_population(city):
    return {"population": POPULATION[city.lower()]}

def count_visits():
    global visits
    visits += 1
    return visits

def slow(seconds=30):
    import time
    time.sleep(seconds)
    return "done"
'''


def rl_sample(sample_id: str = "rl-geo", code: str = ENV_CODE) -> dict:
    from astra_core.formats_doc import example

    sample = example("rl_sample")
    sample["id"] = sample_id
    sample["environment"]["code"] = code
    sample["tools"].append({"type": "function", "function": {
        "name": "slow", "description": "Takes a while.",
        "parameters": {"type": "object", "properties": {"seconds": {"type": "number"}}}}})
    return sample



def sandbox_pool(size: int = 8, call_timeout_s: float = 2.0):
    from astra_sandbox import SandboxConfig, SessionPool

    return SessionPool(size=size, config=SandboxConfig(call_timeout_s=call_timeout_s))


# -- interactive samples (AReaL-SEA): astra-toolgraph's shop domain and a recorded user ------------

def expected_state() -> dict:
    import json

    from astra_toolgraph import data

    namespace: dict = {}
    exec(data.sample_domain()["code"], namespace)  # noqa: S102 - our own bundled environment code
    namespace["place_order"]("C1", "P3", 2)
    return json.loads(json.dumps(namespace["get_state"]()))


def interactive_sample() -> dict:
    from astra_toolgraph import data
    from astra_toolgraph.evolve.export import rl_sample_record

    task = {"id": "task-coffee", "user": {"instruction": "Buy two bags of coffee.", "private_info": "customer C1"},
            "expected_state": expected_state(), "verification": {"verdict": "PASS"}, "meta": {"provenance": []}}
    return rl_sample_record(task, data.sample_domain(), "Hi, I want coffee.")


def user_replies(body: dict) -> str:
    """The recorded user: gives its order, then stops."""
    spoken = sum(m["role"] == "assistant" for m in body["messages"])  # the opening message is the first
    return "Two bags, I am customer C1." if spoken <= 1 else "Thanks! ###STOP###"
