"""`astra-eval run BENCH`: each benchmark's config (every field a flag) and how a run plays its items.

A run picks its items (the benchmark's own, selected by the config, or item records given as inputs),
chooses how each item is played (an endpoint agent, bfcl-eval's handler, or an oracle replaying the
ground truth as a harness check) and writes one eval_result per item and trial (`astra_eval.runner`).
bfcl and tau2 run in their own environments: the command hands over before any of this is imported.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from astra_core.config import check, knob
from astra_core.llm.client import LLMClient, LLMConfig
from astra_core.stage import StageOptions

from astra_eval.agent import HISTORY_REASONING, EndpointAgent, Sampling
from astra_eval.runner import item_source, run_items


def _check_choices(values: list[str], name: str, allowed: tuple[str, ...]) -> None:
    unknown = [v for v in values if v not in allowed]
    check(not unknown, name, f"unknown {', '.join(unknown)}; choose from {' | '.join(allowed)}")


# -- configs ---------------------------------------------------------------------------------------

@dataclass
class RunConfig:
    """Which items a run plays, and how long one may take."""

    limit: int | None = knob(None, "At most this many tasks per category.", minimum=1)
    ids: list[str] = knob([], "Only these task ids.")
    trials: int | None = knob(None, "Runs of every task; trial t samples with seed --seed + t (tau2: tau2's own trial "
                                    "seeds from --seed, default 300); unset: the paper's, tau2 4, acebench 4, bfcl "
                                    "and aime 1.", minimum=1)
    item_timeout: float = knob(1800.0, "Seconds per item; an item past it is recorded as a failure.", minimum=0)

    def validate(self) -> None:
        check(self.item_timeout > 0, "item_timeout", f"must be > 0, got {self.item_timeout}")

    def selection(self, default_trials: int = 1) -> dict:
        return {"limit": self.limit, "ids": self.ids or None, "trials": self.trials or default_trials}


@dataclass
class SampledRunConfig(RunConfig):
    top_p: float | None = knob(None, "Nucleus sampling of the model under test (unset: the endpoint's).",
                                    minimum=0, maximum=1)
    top_k: int | None = knob(None, "Top-k sampling of the model under test (-1: none; unset: the endpoint's).",
                                  minimum=-1)

    def sampling(self, llm: LLMConfig, default_temperature: float | None) -> Sampling:
        temperature = llm.temperature if llm.temperature is not None else default_temperature
        return Sampling(temperature=temperature, top_p=self.top_p, top_k=self.top_k, max_tokens=llm.max_tokens)


@dataclass
class UserSimulatorConfig:
    """The user simulator's endpoint, configured apart from the model under test."""

    user_base_url: str | None = knob(None, "User simulator endpoint (unset: env ASTRA_USER_LLM_BASE_URL, then "
                                           "the agent's endpoint).")
    user_model: str | None = knob(None, "User simulator model (unset: env ASTRA_USER_LLM_MODEL, then the "
                                        "endpoint's first model).")
    user_api_key: str | None = knob(None, "User simulator bearer token (unset: env ASTRA_USER_LLM_API_KEY).")
    user_temperature: float = knob(0.0, "User simulator temperature.", minimum=0)
    user_max_tokens: int | None = knob(None, "User simulator reply length limit.", minimum=1)

    def user_llm(self, agent: LLMConfig) -> LLMConfig:
        """Its LLM config: flags, then ASTRA_USER_LLM_*; no endpoint means the agent's (see `resolve_endpoints`)."""
        return LLMConfig(base_url=self.user_base_url or os.environ.get("ASTRA_USER_LLM_BASE_URL"),
                         model=self.user_model or os.environ.get("ASTRA_USER_LLM_MODEL"),
                         api_key=self.user_api_key or os.environ.get("ASTRA_USER_LLM_API_KEY"),
                         temperature=self.user_temperature, max_tokens=self.user_max_tokens, timeout=agent.timeout,
                         max_retries=agent.max_retries, concurrency=agent.concurrency)

    def user_sampling(self) -> dict:
        return Sampling(temperature=self.user_temperature, max_tokens=self.user_max_tokens).params()


@dataclass
class OracleConfig:
    oracle: bool = knob(False, "Replay the ground truth instead of querying a model (harness check).")
    oracle_drop_rate: float = knob(0.0, "With --oracle: leave out each call with this probability (seeded by --seed).",
                                   minimum=0, maximum=1)

    def oracle_name(self) -> str:
        return f"oracle-drop-{self.oracle_drop_rate:g}" if self.oracle_drop_rate else "oracle"


BFCL_CATEGORIES = ("base", "miss_func", "miss_param", "long_context")


@dataclass
class BfclConfig(SampledRunConfig, OracleConfig):
    categories: list[str] = knob([], f"BFCL v3 multi-turn categories: {' | '.join(BFCL_CATEGORIES)} (none: all).",
                                 flag="category")
    max_turns: int | None = knob(None, "Smoke tests: play only the first N turns (the entry then fails).",
                                   minimum=1)
    history_reasoning: str = knob("keep", "keep: assistant messages go back into the history as the endpoint returned "
                                          "them, reasoning_content included (bfcl-eval's OpenAI FC handler); drop: "
                                          "content and tool calls only (its DeepSeek/Grok handlers).",
                                  choices=HISTORY_REASONING)
    handler: str | None = knob(None, "The leaderboard's route: play every entry with bfcl-eval's own model handler for "
                                     "this bfcl-eval model name (e.g. Qwen/Qwen3-8B-FC: its Qwen FC handler, against a "
                                     "completions endpoint at --base-url). Temperature 0.001 (bfcl generate's) unless "
                                     "--temperature.")
    tokenizer: str | None = knob(None, "With --handler, for local-model handlers: the model's tokenizer directory "
                                       "(bfcl-eval counts prompt tokens; unset: the handler's Hugging Face id).")

    def validate(self) -> None:
        super().validate()
        _check_choices(self.categories, "categories", BFCL_CATEGORIES)
        check(not (self.handler and self.oracle), "oracle", "--handler plays a model; --oracle replays the ground truth")


TAU2_DOMAINS = ("airline", "retail", "telecom")


@dataclass
class Tau2Config(SampledRunConfig, UserSimulatorConfig, OracleConfig):
    domains: list[str] = knob([], f"tau2 domains: {' | '.join(TAU2_DOMAINS)} (none: all three).", flag="domain")
    max_steps: int = knob(200, "tau2's limit on conversation steps.", minimum=1)
    max_errors: int = knob(10, "tau2's limit on tool errors.", minimum=0)

    def validate(self) -> None:
        super().validate()
        _check_choices(self.domains, "domains", TAU2_DOMAINS)


ACE_SPLITS, ACE_LANGUAGES = ("multi_turn", "multi_step"), ("en", "zh")


@dataclass
class AceBenchConfig(SampledRunConfig, UserSimulatorConfig):
    splits: list[str] = knob([], f"ACEBench agent splits: {' | '.join(ACE_SPLITS)} (none: both).", flag="split")
    languages: list[str] = knob(["en"], "Data language: en | zh.", flag="language")
    oracle: bool = knob(False, "Replay ACEBench's milestone calls instead of querying a model.")
    max_messages: int = knob(40, "Messages per run (agent, execution and user turns), ACEBench's max_dialog_turns.",
                             minimum=1)

    def validate(self) -> None:
        super().validate()
        _check_choices(self.splits, "splits", ACE_SPLITS)
        _check_choices(self.languages, "languages", ACE_LANGUAGES)


AIME_YEARS, AIME_SETTINGS = ("aime2024", "aime2025"), ("topk20", "topk-1")


@dataclass
class AimeConfig(RunConfig):  # the decoding settings fix the sampling: no --top-p/--top-k
    years: list[str] = knob([], f"AIME years: {' | '.join(AIME_YEARS)} (none: both).", flag="year")
    settings: list[str] = knob([], "Decoding settings: temperature 0.6, top-p 0.95, top-k 20 (topk20) or none "
                                   "(topk-1) (none: both).", flag="setting")
    samples: int = knob(32, "Samples per problem (one request with n=, topped up by more requests if the endpoint "
                            "sends fewer).", minimum=1)

    def validate(self) -> None:
        super().validate()
        _check_choices(self.years, "years", AIME_YEARS)
        _check_choices(self.settings, "settings", AIME_SETTINGS)


# -- playing items -----------------------------------------------------------------------------------

class WithClient:
    """An async run_item whose LLM clients serve the whole run: `make_run_item(*clients)` gets one client per
    config (configs of the same endpoint and model share one), opened inside the event loop on the first item
    and all closed at the end."""

    def __init__(self, make_run_item: Callable, *configs: LLMConfig):
        self.make_run_item, self.configs = make_run_item, configs
        self.opened: dict[tuple, LLMClient] = {}
        self.run_item: Callable | None = None

    async def __call__(self, item: dict) -> dict:
        if self.run_item is None:
            self.run_item = self.make_run_item(*map(self._client, self.configs))
        return await self.run_item(item)

    def _client(self, config: LLMConfig) -> LLMClient:
        endpoint = (config.base_url, config.model)
        if endpoint not in self.opened:
            self.opened[endpoint] = LLMClient(config)
        return self.opened[endpoint]

    async def close(self) -> None:
        for client in self.opened.values():
            await client.aclose()


async def resolve_endpoints(*configs: LLMConfig) -> None:
    """Fill in base URLs and model names, in place: the agent's endpoint (the embedded server when none is
    set), then the user's (the agent's endpoint when none is set)."""
    agent = configs[0]
    for config in configs:
        if not config.base_url:
            config.base_url, config.api_key = agent.base_url, config.api_key or agent.api_key
        async with LLMClient(config) as client:  # the endpoint answers, or the run stops before any item
            config.model = await client.check()
            config.base_url = client.config.base_url


@dataclass
class Run:
    """One `astra-eval run BENCH` invocation: where its items come from and its endpoint."""

    command: str
    options: StageOptions
    inputs_given: bool
    llm: LLMConfig

    def play(self, items: Callable[[], list[dict]], run_item: Callable, config: RunConfig, model: str,
             seed: int | None) -> None:
        with item_source(self.options, self.inputs_given, items) as options:
            run_items(self.command, options, run_item, concurrency=self.llm.concurrency,
                      item_timeout=config.item_timeout, model=model, seed=seed)


def run_bfcl(run: Run, config: BfclConfig) -> None:
    """BFCL v3 multi-turn, executed on bfcl-eval's backends and scored by its multi_turn_checker.

    Temperature 0.6 unless --temperature is given (the paper's setting). Requests are those of
    bfcl-eval's OpenAI function-calling handler (tools with their `response` schema) against a
    chat-completions endpoint; --handler plays through bfcl-eval's own handler for a model family.
    """
    from astra_eval import bfcl

    seed = run.llm.seed
    if config.handler:
        run_item, model = _bfcl_handler(run.llm, config)
    elif config.oracle:
        def agent_for(entry, ground_truth):
            return bfcl.Oracle(entry, ground_truth, drop_rate=config.oracle_drop_rate, seed=seed or 0)

        run_item = functools.partial(bfcl.run_item, agent_for=agent_for, max_turns=config.max_turns)
        model = config.oracle_name()
    else:
        asyncio.run(resolve_endpoints(run.llm))
        sampling, model = config.sampling(run.llm, bfcl.DEFAULT_TEMPERATURE), run.llm.model
        run_item = WithClient(lambda client: functools.partial(
            bfcl.run_item, agent_for=lambda entry, truth: EndpointAgent(client, sampling, strip_tools=False),
            max_turns=config.max_turns, history_reasoning=config.history_reasoning), run.llm)
    categories = config.categories or list(bfcl.CATEGORIES)
    run.play(lambda: bfcl.items(categories, seed=seed, **config.selection()), run_item, config, model, seed)


def _bfcl_handler(llm: LLMConfig, config: BfclConfig) -> tuple[Callable, str]:
    from astra_eval import bfcl_handler

    check(bool(llm.base_url), "handler", "--handler needs the endpoint serving the model (--base-url)")
    temperature = llm.temperature if llm.temperature is not None else bfcl_handler.BFCL_GENERATE_TEMPERATURE
    handler = bfcl_handler.build(config.handler, base_url=llm.base_url, api_key=llm.api_key, temperature=temperature,
                                 tokenizer=config.tokenizer, model=llm.model)
    return bfcl_handler.HandlerRun(handler), f"{config.handler} (bfcl-eval {type(handler).__name__})"


def run_tau2(run: Run, config: Tau2Config) -> None:
    """tau2-bench: tau2's LLMAgent and user simulator, scored by tau2's evaluate_simulation.

    The agent is greedy (temperature 0) unless --temperature is given; 4 trials per task by default
    (the paper reports pass^1 over 4 trials; `astra-eval summary` shows pass^1..pass^4 and pass@4).
    Seeds as `tau2 run` sets them: base seed 300 unless --seed, tau2's per-trial seed to agent and user.
    A trial that raises scores 0 (tau2's agent_error, as `tau2 run --skip-failed-samples`).
    """
    from astra_eval import tau2

    seed = run.llm.seed if run.llm.seed is not None else tau2.DEFAULT_SEED
    steps = {"max_steps": config.max_steps, "max_errors": config.max_errors}
    if config.oracle:
        model = config.oracle_name()

        def simulate(domain, task, trial_seed):
            return tau2.simulate_oracle(domain, task, drop_rate=config.oracle_drop_rate, seed=trial_seed, **steps)
    else:
        users = config.user_llm(run.llm)
        asyncio.run(resolve_endpoints(run.llm, users))
        model = run.llm.model
        agent = tau2.Endpoint(run.llm.base_url, model, run.llm.api_key, config.sampling(run.llm, 0.0).params())
        user = tau2.Endpoint(users.base_url, users.model, users.api_key, config.user_sampling())

        def simulate(domain, task, trial_seed):
            return tau2.simulate_llm(domain, task, agent, user, seed=trial_seed, **steps)

    domains = config.domains or list(tau2.DOMAINS)
    run.play(lambda: tau2.items(domains, seed=seed, **config.selection(4)),
             functools.partial(tau2.run_item, simulate=simulate), config, model, seed)


def run_acebench(run: Run, config: AceBenchConfig) -> None:
    """ACEBench agent tasks (multi_turn with an LLM user simulator, multi_step), on our implementation of its
    sandbox apps, scored by end-to-end (final state) and process (milestone) accuracy.

    Temperature 0.6 unless --temperature is given; 4 runs per task by default, averaged (the paper's).
    """
    from astra_eval.acebench import play

    if config.oracle:
        model = "oracle"
        run_item = functools.partial(
            play.run_item, agent_for=lambda task, answer: play.Oracle(answer["mile_stone"]),
            user_for=lambda task, lang: play.ScriptedUser(task["question"]), max_messages=config.max_messages)
    else:
        users = config.user_llm(run.llm)
        asyncio.run(resolve_endpoints(run.llm, users))
        model, sampling = run.llm.model, config.sampling(run.llm, play.DEFAULT_TEMPERATURE)

        def make(client: LLMClient, user_client: LLMClient):  # one client if both are the same endpoint
            return functools.partial(
                play.run_item, agent_for=lambda task, answer: EndpointAgent(client, sampling),
                user_for=lambda task, lang: play.LLMUser(user_client, task["question"], lang, config.user_sampling()),
                max_messages=config.max_messages)

        run_item = WithClient(make, run.llm, users)
    splits = config.splits or list(play.SPLITS)
    run.play(lambda: play.items(config.languages, splits, seed=run.llm.seed, **config.selection(play.REPEATS)),
             run_item, config, model, run.llm.seed)


def run_aime(run: Run, config: AimeConfig) -> None:
    """AIME 2024/2025: pass rate over --samples samples per problem under the paper's two decoding settings.

    Answers are read from the last \\boxed{} (else the last integer). Give thinking models room with
    --max-tokens (e.g. 32768).
    """
    from astra_eval import aime

    asyncio.run(resolve_endpoints(run.llm))
    run_item = WithClient(lambda client: functools.partial(
        aime.run_item, client=client, samples=config.samples, max_tokens=run.llm.max_tokens), run.llm)
    years, settings = config.years or list(aime.YEARS), config.settings or list(aime.SETTINGS)
    run.play(lambda: aime.items(years, settings, seed=run.llm.seed, **config.selection()), run_item, config,
             run.llm.model, run.llm.seed)
