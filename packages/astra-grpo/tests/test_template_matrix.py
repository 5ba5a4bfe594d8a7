"""The template matrix: every tool-capable chat template the installed trl ships (DISCOVERED: see
template_families.py), plus two templates that know no tools (the Hermes path), x the episodes a tool-using
policy plays, through the real EpisodeRunner and ChatRenderer.

The policy is scripted: each turn it writes what its own template renders for the intended message after the
conversation so far (what a model trained on that template generates). Environments are in-process recorded
tool outputs (the jailed sandbox is tested elsewhere; here only what the template sees matters). For every
cell:
- a template whose calls cannot be read fails (never skips): the renderer refuses it at start-up;
- the episode ends as it should, without an error, and the environment received the intended calls with
  their names and typed arguments (a family that writes one call per turn: its first; Llama 3.x, whose template
  refuses two: one malformed call);
- every turn's reply is read as TRL reads it (`add_response_schema` + `parse_response`, where TRL knows the
  template);
- the loss mask covers exactly the generated tokens, and the prompt at every turn is the template's own render
  of the conversation so far, or differs from it only as its family's documented re-render says (counted: the
  rollout's `retokenize_match`);
- SFT encodes the finished conversation to the same tokens and mask (SFT and rollouts share one layout);
- on random conversations (hypothesis) the SFT masks equal the `{% generation %}` blocks of TRL's training
  template of the family, where TRL has one.
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
from template_families import (
    COVERED,
    HERMES_FAMILIES,
    LAYOUT_BUGS,
    families,
    tokenizer_for,
    tool_capable_templates,
    training_template,
    with_template,
)


def call(name: str, **arguments) -> dict:
    return {"id": f"c_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def turn(content: str | None = None, *calls: dict, reasoning: str | None = None) -> dict:
    message = {"role": "assistant", "content": content, "tool_calls": list(calls) or None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


ROUND = {"type": "function", "function": {
    "name": "round_number", "description": "Round a number.",
    "parameters": {"type": "object", "properties": {
        "value": {"type": "number"}, "digits": {"type": "integer"}, "commas": {"type": "boolean"}},
        "required": ["value", "digits"]}}}
CAPITAL, POPULATION = call("get_capital", country="Norway"), call("get_population", city="Oslo")
TYPED = call("round_number", value=709000.5, digits=0, commas=True)
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
    "one_call": Scenario([turn(None, TYPED), turn("It rounds to 709,001.")]),
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

# Families whose template renders at most one call per turn: gpt-oss renders a turn's first call (its model ends
# the turn at <|call|>); Llama 3.x's template refuses two, so a policy writing two writes one unreadable reply.
ONE_CALL_PER_TURN = {"gpt_oss": "first", "llama3_json": "malformed"}


def sample_with_tools() -> dict:
    sample = rl_sample()
    sample["tools"].append(ROUND)
    return sample


class RecordingRunner(EpisodeRunner):
    """The real runner, keeping its episodes by the key it hands the engine (the scripted policy reads them)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.episodes = {}

    def _start(self, sample, member):
        episode = super()._start(sample, member)
        self.episodes[id(episode)] = episode
        return episode


class TemplatePolicy:
    """Writes, at turn k, the family's own render of the scenario's k-th intended message after the conversation
    so far, ended by the stop token the template ends it with."""

    def __init__(self, renderer: ChatRenderer, tools: list[dict], turns: list[dict]):
        self.renderer, self.tools, self.turns = renderer, tools, turns
        self.runner: RecordingRunner | None = None
        self.prompts: list[list[int]] = []
        self.texts: list[str] = []

    def _text(self, context: list[dict], message: dict) -> str:
        try:
            return self.renderer.chat.generated_text(context, message, self.tools)[0]
        except TemplateError:  # Llama 3.x refuses two calls in a turn: a policy may still write them
            return "\n".join(self.renderer.chat.generated_text(context, {**message, "tool_calls": [c]}, self.tools)[0]
                             for c in message["tool_calls"])

    def generate(self, prompts, budgets, sampling, keys=None):
        out = []
        for prompt, budget, key in zip(prompts, budgets, keys, strict=True):
            episode = self.runner.episodes[key]
            message = self.turns[min(episode.turns, len(self.turns) - 1)]
            context = episode.messages
            text = self._text(context, message)
            if message.get("tool_calls"):  # the stop token that ends the turn: before its tool results, or as it ends
                message = {**message, "tool_calls": message["tool_calls"][:1]}  # (Llama 3.x refuses two calls)
                following = [{"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "x"}]
            else:
                following = []
            stop = self.renderer.turn_stop_id(message, self.tools, following)
            self.prompts.append(list(prompt))
            self.texts.append(text)
            ids = self.renderer.encode_text(text) + [stop]
            out.append(Generation(ids, True) if len(ids) <= budget else Generation(ids[:budget], False))
        return out

    def push_weights(self, model) -> None:
        pass


@dataclass
class Result:
    kind: str
    output: str


class RecordedEnvironment:
    """In-process sessions answering with recorded tool outputs, keeping every call they received."""

    OUTPUTS = {"get_capital": {"capital": "Oslo"}, "get_population": {"population": "709,000"},
               "round_number": {"rounded": "709,001"}}

    def __init__(self, failing_tool: str | None):
        self.failing_tool = failing_tool
        self.received: list[tuple[str, dict]] = []

    @contextmanager
    def session(self, code, requirements=()):
        yield self

    def call(self, name, arguments):
        self.received.append((name, arguments))
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


_RENDERERS: dict = {}


def renderer_for(family: str, template_kwargs: dict | None = None) -> ChatRenderer:
    key = (family, json.dumps(template_kwargs, sort_keys=True))
    if key not in _RENDERERS:
        _RENDERERS[key] = ChatRenderer(tokenizer_for(family), template_kwargs=template_kwargs)
    return _RENDERERS[key]


def play(family: str, scenario: Scenario):
    renderer = renderer_for(family, scenario.template_kwargs)
    sample = sample_with_tools()
    if scenario.user_replies:
        sample["user"] = {"instruction": "Ask for the capital of Norway."}
    policy = TemplatePolicy(renderer, sample["tools"], scenario.turns)
    environment = RecordedEnvironment(scenario.failing_tool)
    runner = RecordingRunner(policy, renderer, environment,
                             RolloutSettings(max_turns=6, max_new_tokens=400,
                                             max_response_length=scenario.max_response_length),
                             reward_fn=lambda episode: (1.0, {}),
                             user_simulator=ScriptedUser(scenario.user_replies, scenario.user_device))
    policy.runner = runner
    [group] = runner.play([sample], group_size=1)
    return renderer, sample, group.episodes[0], policy, environment


def turn_starts(mask: list[int]) -> list[int]:
    return [i for i in range(len(mask)) if mask[i] and not mask[i - 1]]


def intended_calls(scenario: Scenario, played_turns: int, reader: str) -> tuple[list[tuple[str, dict]], int]:
    """(the calls the environment should receive, the malformed calls expected) for the turns played."""
    calls, malformed = [], 0
    for message in scenario.turns[:played_turns]:
        made = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"] or []]
        if len(made) > 1 and ONE_CALL_PER_TURN.get(reader) == "first":
            made = made[:1]
        elif len(made) > 1 and ONE_CALL_PER_TURN.get(reader) == "malformed":
            made, malformed = [], malformed + 1
        calls += made
    return calls, malformed


# -- TRL's reading of the same replies ----------------------------------------------------------------------

def trl_reader(family: str):
    """The family's tokenizer with TRL's response template set (None where TRL knows no template for it)."""
    from trl.chat_template_utils import add_response_schema

    tokenizer = tokenizer_for(family)
    copy = with_template(tokenizer, tokenizer.chat_template)
    try:
        add_response_schema(copy)
    except ValueError:
        return None
    return copy


def trl_reads(tokenizer, generated: list[int], prompt: list[int], tools: list[dict], stopped: bool) -> dict:
    from trl.chat_template_utils import parse_response

    message = parse_response(tokenizer, generated, prefix=prompt, tools=[openai_tool(t) for t in tools])
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    reasoning = message.get("reasoning_content") or message.get("thinking") or ""
    # TRL strips only the tokenizer's EOS from the content: its GLM template leaves the <|observation|> or <|user|>
    # that ended the turn there
    content = (message.get("content") or "").strip()
    if stopped:
        content = content.removesuffix(tokenizer.decode(generated[-1:])).strip()
    return {"content": content, "reasoning": reasoning.strip(), "calls": calls}


# -- the documented differences between the rollout layout and a template's render of the whole conversation -

THINK = re.compile(r"<think>\n?.*?</think>\n*", re.DOTALL)
ANALYSIS = re.compile(r"<\|start\|>assistant<\|channel\|>analysis<\|message\|>.*?<\|end\|>", re.DOTALL)


def _without(*patterns):
    def normalize(text: str) -> str:
        for pattern, replacement in patterns:
            while (changed := pattern.sub(replacement, text)) != text:  # until what a removal brings together is too
                text = changed
        return text
    return normalize


# reply format -> what its template drops or rewrites when it renders a whole conversation (see docs/model-families.md)
RERENDERED = {
    "qwen3": _without((THINK, "")),  # Qwen3 drops the reasoning of turns before the last user message
    "qwen3_5": _without((THINK, "")),  # Qwen3.5 and Nemotron 3 likewise; Nemotron renders an empty block unlike its prompt
    "glm4_moe": _without((re.compile(r"<think>.*?</think>", re.DOTALL), "<think></think>")),
    "gpt_oss": _without((ANALYSIS, ""), (re.compile(re.escape("<|return|>")), "<|end|>")),
    # Gemma 4 renders a turn's prose after its tool results; DiffusionGemma's template opens a turn after tool
    # results twice
    "gemma4": _without((re.compile(r"(<tool_call\|>|<tool_response\|>)[^<]+(?:<turn\|>\n)?"), r"\1")),
    # DeepSeek-V3 drops reasoning, and renders a second round of calls without its opening tokens
    "deepseek_v3": _without((THINK, ""), (re.compile(r"<｜Assistant｜>|<｜tool▁calls▁begin｜>|<｜tool▁outputs▁(?:begin|end)｜>"
                                                     r"|\n"), "")),
}
@pytest.mark.parametrize("scenario_name", list(SCENARIOS))
@pytest.mark.parametrize("family", families())
def test_episode_tokens_are_the_templates_own(family, scenario_name):
    scenario = SCENARIOS[scenario_name]
    renderer, sample, episode, policy, environment = play(family, scenario)
    COVERED[family] = renderer.reader
    tokenizer, tools = renderer.tokenizer, sample["tools"]
    assert episode.finish_reason != "error", episode.error
    expected_end = {"truncated": "max_length", "user_turns": "user_stop",
                    "user_on_device": "user_stop"}.get(scenario_name, "no_tool_call")
    assert episode.finish_reason == expected_end

    # The environment received the intended calls, named and typed as the policy meant them.
    calls, malformed = intended_calls(scenario, episode.turns, renderer.reader)
    assert environment.received == calls
    assert episode.malformed_calls == malformed

    # The mask is 1 on exactly the generated tokens, turn by turn.
    starts = turn_starts(episode.loss_mask)
    assert len(starts) == episode.turns == len(policy.prompts)
    for start, prompt in zip(starts, policy.prompts, strict=True):
        assert episode.token_ids[:start] == prompt

    # Every reply is read as TRL reads it.
    trl = trl_reader(family)
    if trl is not None:
        assistant_at = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"]
        for start, index in zip(starts, assistant_at, strict=True):
            generated = episode.token_ids[start:start + episode.loss_mask[start:].index(0)] \
                if 0 in episode.loss_mask[start:] else episode.token_ids[start:]
            if renderer.reader == "glm4_moe" and generated[-1] in renderer.stop_ids:
                # GLM ends a turn on the next message's role token, which TRL's GLM template reads as prose (a
                # second prose region then replaces the first): TRL is given the turn without it
                generated = generated[:-1]
            ours = episode.messages[index]
            theirs = trl_reads(trl, generated, episode.token_ids[:start], tools, generated[-1] in renderer.stop_ids)
            our_calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                         for c in ours.get("tool_calls") or []]
            if ours.get("tool_calls") or not episode.malformed_calls:
                assert our_calls == theirs["calls"], (family, theirs)
                assert (ours.get("reasoning_content") or "") == theirs["reasoning"]
                assert (ours["content"] or "") == theirs["content"]

    # What the policy saw at every turn is the family's own render of the conversation so far.
    assistant_at = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"]
    normalize = RERENDERED.get(renderer.reader)
    exempt = LAYOUT_BUGS.get(family, ((), ""))[0]
    compare_renders = "render" not in exempt
    for start, index in zip(starts, assistant_at if compare_renders else [], strict=False):
        seen, own = tokenizer.decode(episode.token_ids[:start]), renderer.render(episode.messages[:index], tools, True)
        assert seen == own or (normalize and normalize(seen) == normalize(own)), (seen[-300:], own[-300:])
    if episode.last_stopped and not episode.malformed_calls and compare_renders:
        finished = episode.messages[:assistant_at[-1] + 1]
        closing, writes_stop = renderer.closing_ids(finished[-1], tools, episode.last_stop)
        ours = episode.token_ids if writes_stop else episode.token_ids[:-1]
        whole, own = tokenizer.decode(ours + closing), renderer.render(finished, tools)
        assert whole == own or (normalize and normalize(whole) == normalize(own)), (whole[-300:], own[-300:])
        assert episode.retokenize_match == (whole == own)

    # SFT trains on the same tokens with the same mask.
    if episode.last_stopped and "sft" not in exempt:
        closing = renderer.closing_ids(episode.messages[assistant_at[-1]], tools, episode.last_stop)[0]
        ids, mask = renderer.encode(episode.messages, tools)
        assert tokenizer.decode(ids) == tokenizer.decode(episode.token_ids + closing)
        assert ids == episode.token_ids + closing
        assert mask == episode.loss_mask + [0] * len(closing)

    if scenario.user_device:  # the user's device traffic rode on its message, and the template never rendered it
        assert [m.get("device") for m in episode.messages if m["role"] == "user"][1] == list(scenario.user_device)
        assert PHONE_SAID not in tokenizer.decode(episode.token_ids)
        plain = [{k: v for k, v in m.items() if k != "device"} for m in episode.messages]
        assert renderer.render(plain, tools) == renderer.render(episode.messages, tools)


@pytest.mark.parametrize("family", families())
def test_reasoning_strip_keeps_it_out_of_sft_targets_and_keep_trains_on_it(family):
    thought = "I should check the capital first."
    messages = [*rl_sample()["messages"], turn(None, CAPITAL, reasoning=thought),
                {"role": "tool", "tool_call_id": "c_get_capital", "name": "get_capital", "content": '{"capital": "Oslo"}'},
                turn("It is Oslo.")]
    tools = rl_sample()["tools"]
    trained = {}
    for mode in ("keep", "strip"):
        renderer = ChatRenderer(tokenizer_for(family), reasoning=mode)
        ids, mask = renderer.encode(messages, tools)
        trained[mode] = renderer.tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
        assert "It is Oslo." in trained[mode]
    assert thought not in trained["strip"]
    # kept wherever the template renders it (not beside a Llama 3.x call) and the generation prompt leaves room for
    # it (not Qwen3.5's thinking-off prompt, which closes the block)
    reader = renderer_for(family)
    prompt = reader.render(messages[:2], tools, True)
    if thought in reader.render(messages, tools) and not prompt.rstrip().endswith("</think>"):
        assert thought in trained["keep"]


def test_every_tool_capable_template_of_trl_is_in_the_matrix():
    """Discovery found TRL's tool-capable templates (a template it cannot read fails its cells above, never skips)."""
    discovered = tool_capable_templates()
    assert {"qwen3", "qwen3_5_think", "glm4moe", "gptoss", "gemma4", "deepseekv3", "llama3_1"} <= set(discovered)
    for family in discovered:
        assert renderer_for(family).style == "template", family


# -- SFT masks against an independent oracle: TRL's {% generation %}-tagged training templates --------------

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
                messages.append({"role": "tool", "tool_call_id": made["id"], "name": made["function"]["name"],
                                 "content": output})
        else:  # an answer: the user speaks again
            messages.append({"role": "user", "content": "And the population?"})
    messages.append(turn(ANSWER))
    return messages


def without_prompt_tail(span: str, prompt_tail: str) -> str:
    """A TRL block less the text it shares with the generation prompt (Qwen2.5's newline, Nemotron's `<think>`)."""
    for k in range(len(prompt_tail), 0, -1):
        for tail in (prompt_tail[-k:], prompt_tail[-k:].rstrip()):
            if tail and span.startswith(tail):
                return span[len(tail):]
    return span


def masked_spans(tokenizer, ids: list[int], mask: list[int]) -> list[str]:
    spans, current = [], []
    for token, flag in zip(ids, mask, strict=True):
        if flag:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    return spans + ([tokenizer.decode(current)] if current else [])


TRAINING_FAMILIES = [f for f in families() if f not in HERMES_FAMILIES and training_template(f)
                     and "trl_masks" not in LAYOUT_BUGS.get(f, ((), ""))[0]]


# A block's reasoning (where the generation prompt opened it, the block holds only its end)
LEADING_THINK = re.compile(r"^(?:<think>)?.*?</think>\s*", re.DOTALL)
REASONING_BLOCK = {"gpt_oss": re.compile(r"<\|channel\|>analysis<\|message\|>.*?<\|end\|>(?:<\|start\|>assistant)?",
                                         re.DOTALL)}


def drops_reasoning(family: str) -> bool:
    """Reasoning is not compared where one of the two cannot hold it: TRL's training template drops it from a turn
    before the last user message (GLM-4.5, Nemotron 3), or the generation prompt closes the reasoning block
    (Qwen3.5 without thinking: the policy cannot write any there, while TRL's template renders it)."""
    renderer = renderer_for(family)
    question = [{"role": "user", "content": "q"}]
    if renderer.render(question, None, True).rstrip().endswith("</think>"):
        return True
    training = with_template(renderer.tokenizer, training_template(family))
    turns = [*question, {"role": "assistant", "content": "a", "reasoning_content": "\u2402r\u2402"}, *question,
             {"role": "assistant", "content": "b"}]
    return "\u2402r\u2402" not in training.apply_chat_template(renderer.template_messages(turns, None), tokenize=False)


@pytest.mark.parametrize("family", TRAINING_FAMILIES)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversations())
def test_sft_masks_equal_the_generation_blocks_of_trls_training_templates(family, messages):
    renderer = renderer_for(family)
    tools = rl_sample()["tools"]
    training = with_template(renderer.tokenizer, training_template(family))

    def trl_render():
        return training.apply_chat_template(renderer.template_messages(messages, tools), tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True,
                                            tools=[openai_tool(t) for t in tools])

    try:
        ids, mask = renderer.encode(messages, tools)
    except TemplateError:  # a conversation the template refuses (gpt-oss: prose and reasoning beside a call)
        with pytest.raises(Exception):  # noqa: B017, PT011 - jinja's or the template's own raise_exception
            trl_render()
        return
    ours = masked_spans(renderer.tokenizer, ids, mask)
    out = trl_render()
    theirs = masked_spans(training, out["input_ids"], out["assistant_masks"])
    # TRL's blocks also hold text the policy does not generate: the generation prompt's end, and whitespace after
    # the stop token (the policy stops at the token)
    question = [{"role": "user", "content": "q"}]
    prompt_tail = renderer.render(question, tools, True)[len(renderer.render(question, tools)):]
    theirs = [without_prompt_tail(span, prompt_tail).rstrip() for span in theirs]
    if drops_reasoning(family):
        reasoning = REASONING_BLOCK.get(renderer.reader, LEADING_THINK)
        ours, theirs = [[reasoning.sub("", span) for span in spans] for spans in (ours, theirs)]
    for stop, stand_in in (renderer.chat.format.renders_end_as if renderer.chat.format else {}).items():
        # gpt-oss writes <|end|> where a final answer is history, <|return|> where it ends the conversation
        ours, theirs = [[span.replace(stop, stand_in) for span in spans] for spans in (ours, theirs)]
    assert ours == theirs
    assert len(ours) == sum(m["role"] == "assistant" for m in messages)


@pytest.mark.parametrize("family", ["gptoss", "gemma4", "qwen3", "deepseekv3"])
def test_a_call_that_cannot_be_read_is_answered_with_the_error_and_the_episode_goes_on(family):
    """The policy writes its call in its family's syntax with arguments that do not parse (an unterminated JSON
    string): a malformed call, answered with the reader's reason, and the episode goes on to its answer (gpt-oss's
    template renders a tool result only after a call: the unreadable one is answered as one)."""
    renderer = renderer_for(family)
    sample = sample_with_tools()
    policy = TemplatePolicy(renderer, sample["tools"], [turn(None, CAPITAL), turn(ANSWER)])
    written = policy._text

    def broken(context, message):
        text = written(context, message)
        if not message.get("tool_calls"):
            return text
        return text.replace('Norway<|"|>', "Norway") if family == "gemma4" else text.replace('"Norway"', '"Norway')

    policy._text = broken
    environment = RecordedEnvironment(None)
    runner = RecordingRunner(policy, renderer, environment, RolloutSettings(max_turns=4, max_new_tokens=400),
                             reward_fn=lambda episode: (1.0, {}))
    policy.runner = runner
    [group] = runner.play([sample], group_size=1)
    episode = group.episodes[0]
    assert episode.finish_reason == "no_tool_call", episode.error
    assert episode.malformed_calls == 1 and environment.received == []
    [error] = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert error.startswith("Error: ") and renderer.reader in error or "not valid JSON" in error
    assert json.dumps(error)[1:-1][:40] in json.dumps(renderer.tokenizer.decode(episode.token_ids))  # the policy saw it
