"""Multi-turn episodes against sandboxed environments (paper section 3.1, Figure 4).

For each RL sample, G episodes, each in its own environment session (no state shared between
episodes). Every turn, all live episodes generate together (one batched engine call); their tool
calls are executed in parallel threads; the observations are rendered exactly as the chat format
renders them and appended as tokens the loss does not see. An episode ends when

- the policy writes no tool call (`no_tool_call`),
- it has played `max_turns` turns (`max_turns`),
- the next observation or turn would not fit in `max_response_length` tokens (`max_length`),
- a tool call timed out (`env_timeout`): the episode keeps what it has,
- the user simulator wrote a stop token (`user_stop`),
- an OpenEnv environment said the episode is done (`env_done`, see `astra_grpo.openenv_sessions`),
- anything went wrong that is not the policy's doing (`error`): the chat template cannot render the
  turn, a tool or its session crashed, the user simulator or the reward failed, or the reward is not
  a finite number. The episode keeps its tokens, its `error` says what happened, its group carries no
  learning signal (Adaptive Batch Filling treats it as invalid; its advantages are 0), and the run goes on.

Samples with a `user` field ({instruction, private_info}) are interactive (AReaL-SEA): a turn without
a tool call goes to the user simulator (astra-toolgraph's, over an OpenAI-compatible endpoint) and
its reply is appended like an observation — tokens the loss does not see — until it writes a stop
token or `max_user_turns` replies have been given.

A tool call the policy wrote badly is answered with an error observation and counts as a call.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from astra_core.llm import LLMUnavailable

from astra_grpo.chat import ChatRenderer, Reply, TemplateError
from astra_grpo.engines import Engine, Generation, Sampling, correction
from astra_grpo.environments import Environments, kind_of


@dataclass
class RolloutSettings:
    max_turns: int = 32
    max_response_length: int = 49152
    max_new_tokens: int = 4096
    sampling: Sampling = field(default_factory=Sampling)
    env_workers: int = 8
    reward: str = "sample"  # sample | f1 | recall | precision | state | tau2
    max_live_episodes: int | None = None  # episodes played at once (each holds a sandbox session); None: all
    max_user_turns: int = 8  # user-simulator replies per interactive episode


@dataclass
class Episode:
    sample: dict
    member: int                       # index within its group
    messages: list[dict]              # OpenAI format: prompt, assistant turns, tool observations
    token_ids: list[int]              # prompt + every generated and observation token, in order
    loss_mask: list[int]              # 1 on tokens the policy generated
    prompt_length: int
    turns: int = 0
    tool_calls: int = 0               # well-formed and malformed
    malformed_calls: int = 0
    finish_reason: str | None = None
    last_stopped: bool = True         # the last turn ended with a stop token
    last_stop: int | None = None      # that stop token
    reward: float = 0.0
    reward_components: dict = field(default_factory=dict)
    retokenize_match: bool | None = None
    user_turns: int = 0               # user-simulator replies (interactive samples)
    user_stop: str | None = None      # the stop token the user simulator ended with
    error: str | None = None          # why the episode ended with finish_reason "error"
    sampler_logprobs: list[float] | None = None  # the engine's log-prob of each token it generated (NaN elsewhere)
    turn_versions: list[int] = field(default_factory=list)  # the policy version that generated each turn
    session: Any = None               # the environment session while the episode runs
    environment_prompt: str | None = None  # the prompt as the opened session made it (an OpenEnv reset's task)

    @property
    def generated_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


@dataclass
class Group:
    """G episodes of one RL sample: the unit of GRPO advantages and of Adaptive Batch Filling."""

    uid: str              # sample id @ position in the sample stream: unique over a run
    sample_id: str
    episodes: list[Episode]
    started_version: int = 0  # the policy version when its rollout round started

    @property
    def oldest_version(self) -> int:
        """The policy version of its oldest turn (the round's start when no episode played a turn)."""
        return min((v for e in self.episodes for v in e.turn_versions), default=self.started_version)

    @property
    def rewards(self) -> list[float]:
        return [e.reward for e in self.episodes]

    @property
    def failed(self) -> bool:
        """An episode of the group ended in an error: the group's rewards say nothing about the policy."""
        return any(e.finish_reason == "error" for e in self.episodes)


RewardFn = Callable[[Episode], tuple[float, dict]]


class EpisodeRunner:
    """Plays episodes with an engine against the sessions of `environments` (astra_grpo.environments.Environments:
    every kind's resources; a bare sandbox pool plays code environments)."""

    def __init__(self, engine: Engine, renderer: ChatRenderer, environments, settings: RolloutSettings,
                 reward_fn: RewardFn | None = None, user_simulator=None, *, tau2=None, openenv=None):
        self.engine = engine
        self.environments = Environments.of(environments)
        for name, given in (("tau2", tau2), ("openenv", openenv)):  # (the signature before Environments)
            if given is not None:
                self.environments.resources[name] = given
        self.user_simulator = user_simulator  # has .reply(user, messages, act) -> turn with .content, .stop, .device
        self.renderer = renderer
        self.settings = settings
        self.reward_fn = reward_fn or self._default_reward
        self.retokenize_mismatches = 0
        self.policy_version = 0  # tags the turns of an engine that does not say which version generated them
        self._warned_mismatch = False
        self._warned_mixed_tasks = False
        self._lock = threading.Lock()

    # -- public ------------------------------------------------------------------------------------
    def play(self, samples: list[dict], group_size: int, uids: list[str] | None = None) -> list[Group]:
        episodes = [self._start(sample, member) for sample in samples for member in range(group_size)]
        # A session pool hands out one session per worker: play at most that many episodes at once.
        wave = self.settings.max_live_episodes or len(episodes)
        for start in range(0, len(episodes), wave):
            self._play_wave(episodes[start:start + wave])
        for episode in episodes:
            self._check_retokenization(episode)
        uids = uids or [s["id"] for s in samples]
        self._warn_mixed_tasks(episodes, group_size)
        return [Group(uid=uid, sample_id=sample["id"], episodes=episodes[i * group_size:(i + 1) * group_size])
                for i, (uid, sample) in enumerate(zip(uids, samples, strict=True))]

    def _warn_mixed_tasks(self, episodes: list[Episode], group_size: int) -> None:
        """Once per runner: a group whose episodes got different tasks from their resets (a server that picks its
        task at reset) compares the rewards of different questions."""
        for start in range(0, len(episodes), group_size):
            group = episodes[start:start + group_size]
            prompts = {e.environment_prompt for e in group if e.environment_prompt is not None}
            if not self._warned_mixed_tasks and len(prompts) > 1:
                self._warned_mixed_tasks = True
                print(f"astra-grpo: WARNING: the episodes of sample {group[0].sample['id']} got different tasks from "
                      "their OpenEnv resets, so its group compares different questions; reset arguments that fix "
                      "the task (a seed, an id) keep a group on one", file=sys.stderr)

    def _play_wave(self, episodes: list[Episode]) -> None:
        """Play episodes together to the end and score them; their sessions close afterwards."""
        with ExitStack() as sessions, ThreadPoolExecutor(max_workers=self.settings.env_workers) as pool:
            opening = [e for e in episodes if not e.done and kind_of(e.sample).opens_at_start]
            list(pool.map(lambda e: self._guarded(e, self._open_at_start, e, sessions), opening))
            live = [e for e in episodes if not e.done]
            while live:
                self._turn(live, pool, sessions)
                live = [e for e in live if not e.done]
            for episode, (reward, components) in zip(episodes, pool.map(self._score, episodes), strict=True):
                episode.reward, episode.reward_components = reward, components
        for episode in episodes:
            episode.session = None

    # -- one turn of every live episode -----------------------------------------------------------
    def _start(self, sample: dict, member: int) -> Episode:
        prompt = self.renderer.prompt_ids(sample["messages"], sample["tools"])
        episode = Episode(sample=sample, member=member, messages=[dict(m) for m in sample["messages"]],
                          token_ids=list(prompt), loss_mask=[0] * len(prompt), prompt_length=len(prompt))
        if self._room(episode) < 1:
            episode.finish_reason = "max_length"
        return episode

    def _open_at_start(self, episode: Episode, sessions: ExitStack) -> None:
        """The session of an environment that opens before the first turn (an OpenEnv reset); the prompt as it
        then says (its task ends the prompt)."""
        messages = kind_of(episode.sample).begin(self._session(episode, sessions), episode.sample)
        if messages is None:
            return
        episode.messages, episode.environment_prompt = messages, repr(messages)
        prompt = self.renderer.prompt_ids(episode.messages, episode.sample["tools"])
        episode.token_ids, episode.loss_mask, episode.prompt_length = list(prompt), [0] * len(prompt), len(prompt)

    def _room(self, episode: Episode) -> int:
        return self.settings.max_response_length - (len(episode.token_ids) - episode.prompt_length)

    def _turn(self, live: list[Episode], pool: ThreadPoolExecutor, sessions: ExitStack) -> None:
        budgets = [min(self.settings.max_new_tokens, self._room(e)) for e in live]
        generations = self.engine.generate([e.token_ids for e in live], budgets, self.settings.sampling,
                                           keys=[id(e) for e in live])
        replies = [self._guarded(e, self._take_generation, e, g) for e, g in zip(live, generations, strict=True)]
        acting = [(e, r) for e, r in zip(live, replies, strict=True) if r is not None and not e.done]
        results = list(pool.map(lambda pair: self._guarded(pair[0], self._act, pair[0], pair[1], sessions), acting))
        for (episode, _), result in zip(acting, results, strict=True):
            if result is not None and not episode.done:
                self._guarded(episode, self._observe, episode, *result)

    @staticmethod
    def _guarded(episode: Episode, step: Callable, *args):
        """Run one step of one episode; any failure ends that episode (not the run) with its error, except a user
        simulator's endpoint that does not answer: every later episode would fail the same way."""
        try:
            return step(*args)
        except LLMUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever broke, it must not end the training run
            _fail(episode, f"{type(exc).__name__}: {exc}")
            return None

    def _take_generation(self, episode: Episode, generation: Generation) -> Reply | None:
        """Append the turn; None when the episode ends without acting on it."""
        ids = generation.token_ids
        correction.record(episode, generation.logprobs, len(episode.token_ids))
        episode.turn_versions.append(self.policy_version if generation.version is None else generation.version)
        reply = self.renderer.read_generation(ids, episode.token_ids, generation.stopped, episode.sample["tools"])
        episode.token_ids += ids
        episode.loss_mask += [1] * len(ids)
        episode.turns += 1
        episode.last_stopped = generation.stopped
        episode.last_stop = ids[-1] if generation.stopped and ids else None
        episode.messages.append(self.renderer.assistant_message(reply, episode.turns))
        episode.tool_calls += len(reply.calls) + len(reply.malformed)
        episode.malformed_calls += len(reply.malformed)
        if not generation.stopped and self._room(episode) < 1:
            episode.finish_reason = "max_length"  # cut by the sequence budget, not the per-turn one
            return None
        if not reply.calls and not reply.malformed:
            if self._user_speaks(episode):
                return reply
            episode.finish_reason = "no_tool_call"
            return None
        return reply

    def _user_speaks(self, episode: Episode) -> bool:
        if not episode.sample.get("user"):
            return False
        if self.user_simulator is None:
            raise RuntimeError(f"sample {episode.sample['id']} has a user but no user simulator was given")
        return episode.user_turns < self.settings.max_user_turns

    def _act(self, episode: Episode, reply: Reply, sessions: ExitStack) -> tuple[list[dict], bool]:
        """Execute the turn's calls in the episode's session, or ask the user simulator when the turn
        called nothing (runs in a worker thread)."""
        if not reply.calls and not reply.malformed:
            turn = self.user_simulator.reply(episode.sample["user"], episode.messages,
                                             act=self._users_device(episode, sessions))
            episode.user_turns += 1
            episode.user_stop = turn.stop
            message = {"role": "user", "content": turn.content}
            if turn.device:  # for tau2's evaluator; chat templates render only the content
                message["device"] = list(turn.device)
            return ([message] if turn.content or turn.device else []), False
        messages = []
        calls = episode.messages[-1].get("tool_calls", [])
        for call, parsed in zip(calls, reply.calls, strict=True):
            result = self._session(episode, sessions).call(parsed.name, parsed.arguments, call["id"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "name": parsed.name,
                             "content": result.output})
            if result.kind == "timeout":
                return messages, True
        for index, reason in enumerate(reply.malformed):
            messages.append({"role": "tool", "tool_call_id": f"malformed_{episode.turns}_{index}",
                             "content": f"Error: {reason}"})
        return messages, False

    def _observe(self, episode: Episode, observations: list[dict], timed_out: bool) -> None:
        played = episode.messages[-1]  # the assistant turn the observations answer
        episode.messages += observations
        if timed_out:
            episode.finish_reason = "env_timeout"
            return
        if episode.user_stop is not None:
            episode.finish_reason = "user_stop"
            return
        if episode.session is not None and episode.session.done:  # the environment ended the episode (OpenEnv)
            episode.finish_reason = "env_done"
            return
        if episode.turns >= self.settings.max_turns:
            episode.finish_reason = "max_turns"
            return
        ids = self.renderer.observation_ids(played, observations, episode.sample["tools"], episode.last_stop)
        if len(ids) + 1 > self._room(episode):
            episode.finish_reason = "max_length"
            return
        episode.token_ids += ids
        episode.loss_mask += [0] * len(ids)

    def _users_device(self, episode: Episode, sessions: ExitStack):
        """How the user simulator runs the user's own tools (tau2 telecom: their phone) in the episode's
        environment; None for a user without tools."""
        kind = kind_of(episode.sample)
        if not episode.sample["user"].get("tools") or not kind.has_user_device:
            return None
        return kind.user_device(self._session(episode, sessions))

    def _session(self, episode: Episode, sessions: ExitStack):
        if episode.session is None:
            context = self.environments.session(episode.sample)
            episode.session = context.__enter__()
            with self._lock:
                sessions.push(_closer(context, episode))
        return episode.session

    # -- reward and checks --------------------------------------------------------------------------
    def _score(self, episode: Episode) -> tuple[float, dict]:
        """(reward, components); a failed episode, a reward that raises or is not finite score 0 as errors."""
        if episode.finish_reason == "error":
            return 0.0, {}
        try:
            reward, components = self.reward_fn(episode)
            reward = float(reward)
        except Exception as exc:  # noqa: BLE001 - a reward bug ends this episode, not the run
            _fail(episode, f"reward: {type(exc).__name__}: {exc}")
            return 0.0, {}
        if not math.isfinite(reward):
            _fail(episode, f"reward is not a finite number: {reward}")
            return 0.0, components
        return reward, components

    def _default_reward(self, episode: Episode) -> tuple[float, dict]:
        """The environment's own reward where the reward kind is one it gives (tau2's, OpenEnv's), else
        astra-reward's (with the environment's state for the `state` reward)."""
        from astra_grpo.rewards import reward_kind, score_episode

        kind = reward_kind(episode.sample, self.settings.reward)
        environment = kind_of(episode.sample)
        if kind in environment.rewards:
            return environment.reward(self.environments.pool(environment.name), episode)
        state = environment.state(self.environments.pool(environment.name), episode) if kind == "state" else None
        return score_episode(episode.sample, episode.messages, episode.malformed_calls, self.settings.reward, state)

    def _check_retokenization(self, episode: Episode) -> None:
        """Token-in/token-out is exact by construction; count where re-rendering would differ."""
        last = max(i for i, m in enumerate(episode.messages) if m["role"] == "assistant") if episode.turns else None
        if last is None:
            return
        try:
            text = self.renderer.render(episode.messages[:last + 1], episode.sample["tools"])
            closing, writes_stop = self.renderer.closing_ids(episode.messages[last], episode.sample["tools"],
                                                             episode.last_stop)
        except TemplateError:
            return  # the template cannot render the episode as a whole: nothing to compare with
        expected = self.renderer.encode_text(text)
        # GLM writes no token after a finished conversation's last turn: the stop the policy generated is not there
        ours = (episode.token_ids if writes_stop else episode.token_ids[:-1]) + closing
        episode.retokenize_match = ours == expected
        if episode.retokenize_match:
            return
        self.retokenize_mismatches += 1
        decode = self.renderer.tokenizer.decode
        if decode(ours) == decode(expected):
            return  # the same text: a sampled token sequence that is not its canonical encoding (counted only)
        if episode.malformed_calls:
            return  # a malformed call stays in the generated text but is no structured call: differs by design
        if not self._warned_mismatch:
            self._warned_mismatch = True
            at = next((i for i, (a, b) in enumerate(zip(ours, expected, strict=False)) if a != b),
                      min(len(ours), len(expected)))
            print(f"astra-grpo: warning: the chat template renders the episode of {episode.sample['id']} as a "
                  f"different text than the one generated, from token {at}: {decode(expected[at:at + 12])!r} "
                  f"instead of {decode(ours[at:at + 12])!r} (training uses the generated tokens; further "
                  "mismatches are only counted)", file=sys.stderr)


def _fail(episode: Episode, error: str) -> None:
    episode.finish_reason = "error"
    episode.error = error[:2000]


def _closer(context, episode: Episode):
    """Close an episode's session; a failure to close is that episode's error, not the run's."""
    def close(*exc_info) -> bool:
        try:
            context.__exit__(*exc_info)
        except Exception as exc:  # noqa: BLE001
            if episode.finish_reason != "error":
                _fail(episode, f"closing the environment session: {type(exc).__name__}: {exc}")
        return False
    return close


def rollout_record(group: Group, episode: Episode, *, command: str, step: int | None = None,
                   group_index: int | None = None, status: str | None = None, model: str | None = None,
                   seed: int | None = None, trained_version: int | None = None, reason: str | None = None) -> dict:
    """A `rollout` record (docs/formats.md) of one finished episode."""
    from astra_core.records import add_provenance, new_record

    suffix = f"/step{step}" if step is not None else ""
    record = new_record(f"{group.uid}{suffix}/{episode.member}", parent=episode.sample,
                        sample_id=episode.sample["id"], messages=episode.messages, reward=episode.reward,
                        reward_components=episode.reward_components, num_turns=episode.turns,
                        num_tool_calls=episode.tool_calls, finish_reason=episode.finish_reason,
                        member=episode.member, malformed_calls=episode.malformed_calls,
                        response_tokens=episode.generated_tokens, retokenize_match=episode.retokenize_match)
    if episode.error is not None:
        record["error"] = episode.error
    if episode.sample.get("user"):
        record.update(user_turns=episode.user_turns, user_stop=episode.user_stop)
    if step is not None:
        record["step"] = step
    if group_index is not None:
        record["group"] = group_index
    if status is not None:
        record["status"] = status  # trained | buffered | discarded (Adaptive Batch Filling)
    if reason is not None:
        record["reason"] = reason  # why a group was discarded
    if trained_version is not None:  # asynchronous runs: which policy versions played it, how far behind it was
        record.update(policy_versions=episode.turn_versions, staleness=trained_version - group.oldest_version)
    return add_provenance(record, command, model=model, seed=seed)
