"""The template matrix: real chat templates of every supported family (template_families.py) x the episodes
a tool-using policy plays, through the real EpisodeRunner and ChatRenderer.

The policy is scripted: each turn it writes what its own template renders for the intended message (what
a model trained on that template generates). Environments are in-process recorded tool outputs (the jailed
sandbox is tested elsewhere; here only what the template sees matters). Asserted for every cell:
- the episode ends without an error;
- the loss mask covers exactly the generated tokens;
- the token sequence the policy saw equals the family's own render of the conversation at every turn,
  observations included (for Qwen3, whose template drops reasoning from earlier turns, against its
  prefix-preserving variant; the original differs only by those <think> blocks, which is counted);
- SFT encodes the finished conversation to the same tokens and mask (SFT and rollouts share one layout).
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from astra_core.users import UserTurn
from astra_grpo.chat import ChatRenderer, TemplateError, openai_tool
from astra_grpo.engines import Generation
from astra_grpo.rollout import EpisodeRunner, RolloutSettings
from grpo_support import rl_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from template_families import FAMILIES, template_text, tokenizer_for

THINK_BLOCK = re.compile(r"<think>\n.*?\n</think>\n\n", re.DOTALL)


def call(name: str, **arguments) -> dict:
    return {"id": f"c_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def turn(content: str | None = None, *calls: dict, reasoning: str | None = None) -> dict:
    message = {"role": "assistant", "content": content, "tool_calls": list(calls) or None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


CAPITAL, POPULATION = call("get_capital", country="Norway"), call("get_population", city="Oslo")
ANSWER = "About 709,000 people live in Oslo."
PHONE_SAID = "Wi-Fi: ON (connected to HomeNet)"  # what the user's phone answered: never for the policy's eyes


@dataclass
class Scenario:
    turns: list[dict]                       # what the policy means to write, turn by turn
    user_replies: tuple[str, ...] = ()      # the user simulator's replies, in order (interactive sample)
    template_kwargs: dict | None = None
    max_response_length: int = 4096
    failing_tool: str | None = None         # this tool answers with an error
    user_device: tuple = ()                 # the user's own tool traffic before its first reply (tau2 telecom)


SCENARIOS = {
    "reasoning": Scenario([turn(None, CAPITAL, reasoning="I need the capital first."),
                           turn(None, POPULATION, reasoning="Now its population."),
                           turn(ANSWER, reasoning="I have both.")]),
    "no_reasoning": Scenario([turn(None, CAPITAL), turn(None, POPULATION), turn(ANSWER)]),
    "empty_reasoning": Scenario([turn(None, CAPITAL), turn(None, POPULATION), turn(ANSWER)],
                                template_kwargs={"enable_thinking": False}),
    "prose_and_call": Scenario([turn("Let me look that up.", CAPITAL), turn("Now the population.", POPULATION),
                                turn(ANSWER)]),
    "parallel_calls": Scenario([turn(None, CAPITAL, POPULATION), turn(ANSWER)]),
    "tool_error": Scenario([turn(None, POPULATION), turn("The lookup failed.")], failing_tool="get_population"),
    "user_turns": Scenario([turn("Which country do you mean?"), turn(None, CAPITAL, reasoning="Norway then."),
                            turn("It is Oslo.")],
                           user_replies=("Norway, please.", "Thanks! ###STOP###")),
    "truncated": Scenario([turn(None, CAPITAL), turn("A very long answer " * 40)], max_response_length=120),
    "user_on_device": Scenario([turn("Please turn Wi-Fi on."), turn("Great, it is on.")],
                               user_replies=("Done.", "Thanks! ###STOP###"),
                               user_device=({"role": "assistant", "content": None, "tool_calls": [call("toggle_wifi")]},
                                            {"role": "tool", "tool_call_id": "c_toggle_wifi", "content": PHONE_SAID})),
}


class TemplatePolicy:
    """Writes, at turn k of an episode, the family's rendering of the scenario's k-th intended message."""

    def __init__(self, renderer: ChatRenderer, tools: list[dict], turns: list[dict]):
        self.renderer = renderer
        self.header = self._generation_header(tools)
        self.texts = [self._text(message, tools) for message in turns]
        self.prompts: list[list[int]] = []

    def _generation_header(self, tools) -> str:
        question = [{"role": "user", "content": "q"}]
        return self.renderer.render(question, tools, True)[len(self.renderer.render(question, tools)):].strip()

    def _text(self, message: dict, tools) -> str:
        try:
            return self.renderer.assistant_text(message, tools)
        except TemplateError:
            # Llama 3.x templates refuse parallel calls; a policy may still write two, one after the other.
            return "\n".join(self.renderer.assistant_text({**message, "tool_calls": [c]}, tools)
                             for c in message["tool_calls"])

    def generate(self, prompts, budgets, sampling, keys=None):
        out = []
        for prompt, budget in zip(prompts, budgets, strict=True):
            self.prompts.append(list(prompt))
            played = self.renderer.tokenizer.decode(prompt).count(self.header) - 1
            ids = self.renderer.encode_text(self.texts[min(played, len(self.texts) - 1)]) + [self.renderer.turn_stop_id]
            out.append(Generation(ids, True) if len(ids) <= budget else Generation(ids[:budget], False))
        return out

    def push_weights(self, model) -> None:
        pass


@dataclass
class Result:
    kind: str
    output: str


class RecordedEnvironment:
    """In-process sessions answering with recorded tool outputs."""

    OUTPUTS = {"get_capital": {"capital": "Oslo"}, "get_population": {"population": "709,000"}}

    def __init__(self, failing_tool: str | None):
        self.failing_tool = failing_tool

    @contextmanager
    def session(self, code, requirements=()):
        yield self

    def call(self, name, arguments):
        if name == self.failing_tool:
            return Result("error", f"Error: KeyError: {arguments}")
        return Result("ok", json.dumps(self.OUTPUTS[name]))

    def state(self):
        return {}


class ScriptedUser:
    def __init__(self, replies, device=()):
        self.replies, self.device = list(replies), device

    def reply(self, user, messages, act=None):
        text = self.replies.pop(0)
        stop = "###STOP###" if "###STOP###" in text else None
        device, self.device = self.device, ()
        return UserTurn(content=text.replace("###STOP###", "").strip(), stop=stop, device=device)


def play(family: str, scenario: Scenario):
    renderer = ChatRenderer(tokenizer_for(family), template_kwargs=scenario.template_kwargs)
    sample = rl_sample()
    if scenario.user_replies:
        sample["user"] = {"instruction": "Ask for the capital of Norway."}
    policy = TemplatePolicy(renderer, sample["tools"], scenario.turns)
    runner = EpisodeRunner(policy, renderer, RecordedEnvironment(scenario.failing_tool),
                           RolloutSettings(max_turns=6, max_new_tokens=400,
                                           max_response_length=scenario.max_response_length),
                           reward_fn=lambda episode: (1.0, {}),
                           user_simulator=ScriptedUser(scenario.user_replies, scenario.user_device))
    [group] = runner.play([sample], group_size=1)
    return renderer, sample, group.episodes[0], policy


def turn_starts(mask: list[int]) -> list[int]:
    return [i for i in range(len(mask)) if mask[i] and not mask[i - 1]]


@pytest.mark.parametrize("scenario_name", list(SCENARIOS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_episode_tokens_are_the_templates_own(family, scenario_name):
    scenario = SCENARIOS[scenario_name]
    renderer, sample, episode, policy = play(family, scenario)
    tokenizer, tools = renderer.tokenizer, sample["tools"]
    assert episode.finish_reason != "error", episode.error
    expected_end = {"truncated": "max_length", "user_turns": "user_stop",
                    "user_on_device": "user_stop"}.get(scenario_name, "no_tool_call")
    assert episode.finish_reason == expected_end
    if scenario_name == "parallel_calls":  # answered as two calls, or as one unreadable block with an error
        assert episode.tool_calls == 2 or (renderer.call_style == "json" and episode.malformed_calls == 1)

    # The mask is 1 on exactly the generated tokens, turn by turn.
    starts = turn_starts(episode.loss_mask)
    assert len(starts) == episode.turns == len(policy.prompts)
    for start, prompt in zip(starts, policy.prompts, strict=True):
        assert episode.token_ids[:start] == prompt

    # What the policy saw at every turn is the family's own render of the conversation so far.
    layout = ChatRenderer(tokenizer_for(family, layout=True), template_kwargs=scenario.template_kwargs)
    assistant_at = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"]
    for start, index in zip(starts, assistant_at, strict=True):
        assert tokenizer.decode(episode.token_ids[:start]) == layout.render(episode.messages[:index], tools, True)
    if episode.last_stopped:
        whole = tokenizer.decode(episode.token_ids + renderer.closing_ids(True))
        finished = episode.messages[:assistant_at[-1] + 1]
        assert whole == layout.render(finished, tools)
        original = renderer.render(finished, tools)
        if FAMILIES[family].layout_template:
            assert THINK_BLOCK.sub("", whole) == THINK_BLOCK.sub("", original)  # the documented difference
            assert episode.retokenize_match == (whole == original)
        else:
            assert whole == original and episode.retokenize_match

        # SFT trains on the same tokens with the same mask.
        ids, mask = renderer.encode(episode.messages, tools)
        assert ids == episode.token_ids + renderer.closing_ids(True)
        assert mask == episode.loss_mask + [0] * len(renderer.closing_ids(True))

    if scenario.user_device:  # the user's device traffic rode on its message, and the template never rendered it
        assert [m.get("device") for m in episode.messages if m["role"] == "user"][1] == list(scenario.user_device)
        assert PHONE_SAID not in tokenizer.decode(episode.token_ids)
        plain = [{k: v for k, v in m.items() if k != "device"} for m in episode.messages]
        assert renderer.render(plain, tools) == renderer.render(episode.messages, tools)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_calls_are_parsed_back_from_what_the_template_writes(family):
    renderer, _, episode, _ = play(family, SCENARIOS["prose_and_call"])
    calls = [c["function"]["name"] for m in episode.messages for c in m.get("tool_calls") or []]
    assert calls == ["get_capital", "get_population"]
    tools_seen = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert tools_seen == ['{"capital": "Oslo"}', '{"population": "709,000"}']


# -- SFT masks against an independent oracle: TRL's {% generation %}-tagged training templates --------------

TRAINING_TEMPLATES = {"qwen3": "qwen3_training.jinja", "qwen3_instruct_2507": "qwen3_instruct_2507_training.jinja",
                      "qwen2_5": "qwen2_5_training.jinja", "gemma3": "gemma3_training.jinja"}


@st.composite
def conversations(draw) -> list[dict]:
    """A random finished tool-use conversation: reasoning or not, prose or not, 0-2 calls per turn, tool
    results and errors, users speaking again, always ending with an assistant turn."""
    messages = [{"role": "system", "content": "You answer geography questions."}] if draw(st.booleans()) else []
    messages.append({"role": "user", "content": draw(st.sampled_from(["Capital of Norway?", "Population of Oslo?"]))})
    for _ in range(draw(st.integers(1, 4))):
        calls = draw(st.lists(st.sampled_from([CAPITAL, POPULATION]), max_size=2))
        prose = draw(st.sampled_from(["", "Let me look.", ANSWER]))
        reasoning = draw(st.sampled_from([None, "", "I should check the tools."]))
        messages.append(turn(prose or (None if calls else ANSWER), *calls, reasoning=reasoning))
        if calls:
            for made in calls:
                output = draw(st.sampled_from(['{"capital": "Oslo"}', "Error: KeyError: 'oslo'"]))
                messages.append({"role": "tool", "tool_call_id": made["id"], "content": output})
        else:  # an answer: the user speaks again
            messages.append({"role": "user", "content": "And the population?"})
    messages.append(turn(ANSWER))
    return messages


def without_prompt_tail(span: str, prompt_tail: str) -> str:
    overlap = next((k for k in range(len(prompt_tail), 0, -1) if span.startswith(prompt_tail[-k:])), 0)
    return span[overlap:]


def masked_spans(tokenizer, ids: list[int], mask: list[int]) -> list[str]:
    spans, current = [], []
    for token, flag in zip(ids, mask, strict=True):
        if flag:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    return spans + ([tokenizer.decode(current)] if current else [])


@pytest.mark.parametrize("family", list(TRAINING_TEMPLATES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversations())
def test_sft_masks_equal_the_generation_blocks_of_trls_training_templates(family, messages):
    renderer = ChatRenderer(tokenizer_for(family))
    tools = rl_sample()["tools"]
    ids, mask = renderer.encode(messages, tools)
    ours = masked_spans(renderer.tokenizer, ids, mask)

    training = tokenizer_for(family)  # a copy with the training template, so the cached one stays as is
    training = type(training)(tokenizer_object=training.backend_tokenizer, eos_token=training.eos_token,
                              bos_token=training.bos_token, pad_token=training.pad_token,
                              chat_template=template_text(TRAINING_TEMPLATES[family]))
    kwargs = {"tools": [openai_tool(t) for t in tools]} if renderer.style == "template" else {}
    out = training.apply_chat_template(renderer.template_messages(messages, tools), tokenize=True, return_dict=True,
                                       return_assistant_tokens_mask=True, **kwargs)
    theirs = masked_spans(training, out["input_ids"], out["assistant_masks"])
    # Some of TRL's blocks also hold text the policy never generates: the newline after the end-of-turn
    # token (the policy stops at the token) and, in qwen2_5's, the newline that ends the generation prompt.
    question = [{"role": "user", "content": "q"}]
    prompt_tail = renderer.render(question, tools, True)[len(renderer.render(question, tools)):]
    assert ours == [without_prompt_tail(span, prompt_tail).removesuffix(renderer.after_stop) for span in theirs]
    assert len(ours) == sum(m["role"] == "assistant" for m in messages)
