"""The astra-eval command: `run BENCH` writes eval_result records; `summary` and `compare` report on them."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable

import click
from astra_core.llm.client import LLMClient, LLMConfig
from astra_core.options import llm_config_from, llm_options, report_errors, stage_options, stage_options_from

from astra_eval import benchenv
from astra_eval.agent import HISTORY_REASONING, EndpointAgent, Sampling
from astra_eval.runner import item_source, run_items


@click.group()
@click.version_option(package_name="astra-eval")
def main() -> None:
    """Benchmarks scored by their own checkers: BFCL v3 multi-turn, tau2-bench, ACEBench, AIME.

    \b
      astra-eval run bfcl --category base --limit 5 -o bfcl.jsonl
      astra-eval summary bfcl.jsonl tau2.jsonl
      astra-eval compare base/ sft/ rl/ --png compare.png
    """


@main.group()
def run() -> None:
    """Run a benchmark against an OpenAI-compatible endpoint; one eval_result per item and trial.

    Items come from the benchmark's own data, selected with the options below, or from item
    records given as INPUTS ('-' for stdin). --resume skips item ids already in -o FILE.
    """


def run_options(f: Callable) -> Callable:
    """Selection and reproducibility options shared by every `run` command."""
    options = [
        stage_options,
        llm_options,
        click.option("--limit", type=int, help="At most this many tasks per category."),
        click.option("--ids", help="Only these task ids (comma-separated)."),
        click.option("--trials", type=int, help="Runs of every task; trial t samples with seed --seed + t "
                                                 "(tau2: tau2's own trial seeds from --seed, default 300) "
                                                 "[default: the paper's: tau2 4, acebench 4, bfcl and aime 1]."),
        click.option("--item-timeout", type=float, default=1800.0, show_default=True,
                     help="Seconds per item; an item past it is recorded as a failure."),
        click.option("--top-p", type=float), click.option("--top-k", type=int),
        report_errors,
    ]
    for option in reversed(options):
        f = option(f)
    return f


def common(kwargs: dict, *, trials: int = 1) -> tuple:
    """Pop the shared options: (stage options, inputs given?, llm config, selection); `trials` is the
    benchmark's default number of runs per task."""
    inputs_given = bool(kwargs.get("inputs"))
    options = stage_options_from(kwargs)
    config = llm_config_from(kwargs)
    selection = {"limit": kwargs.pop("limit"), "ids": kwargs.pop("ids").split(",") if kwargs.get("ids") else None,
                 "trials": kwargs.pop("trials") or trials}
    return options, inputs_given, config, selection


async def resolve_model(config: LLMConfig) -> str:
    async with LLMClient(config) as client:
        return await client.model()


def sampling_from(config: LLMConfig, kwargs: dict, default_temperature: float | None) -> Sampling:
    temperature = config.temperature if config.temperature is not None else default_temperature
    return Sampling(temperature=temperature, top_p=kwargs.pop("top_p", None), top_k=kwargs.pop("top_k", None),
                    max_tokens=config.max_tokens)


class WithClient:
    """An async run_item sharing one LLM client for the whole run (opened inside the event loop)."""

    def __init__(self, config: LLMConfig, make_run_item: Callable):
        self.config, self.make_run_item = config, make_run_item
        self.client: LLMClient | None = None
        self.run_item: Callable | None = None

    async def __call__(self, item: dict) -> dict:
        if self.client is None:
            self.client = LLMClient(self.config)
            self.run_item = self.make_run_item(self.client)
        return await self.run_item(item)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()


@run.command("bfcl")
@run_options
@click.option("--category", "categories", multiple=True, type=click.Choice(["base", "miss_func", "miss_param",
                                                                          "long_context"]),
              help="BFCL v3 multi-turn categories [default: all four].")
@click.option("--oracle", is_flag=True, help="Replay the ground truth instead of querying a model (harness check).")
@click.option("--oracle-drop-rate", type=float, default=0.0, help="With --oracle: leave out each call with this "
                                                                   "probability (seeded by --seed).")
@click.option("--max-turns", type=int, help="Smoke tests: play only the first N turns (the entry then fails).")
@click.option("--history-reasoning", type=click.Choice(HISTORY_REASONING), default="keep", show_default=True,
              help="keep: assistant messages go back into the history as the endpoint returned them, "
                   "reasoning_content included (bfcl-eval's OpenAI FC handler); drop: content and tool calls "
                   "only (its DeepSeek/Grok handlers).")
@click.option("--handler", metavar="NAME",
              help="The leaderboard's route: play every entry with bfcl-eval's own model handler for NAME, a bfcl-eval "
                   "model name (e.g. Qwen/Qwen3-8B-FC: its Qwen FC handler, against a completions endpoint at "
                   "--base-url). Temperature 0.001 (bfcl generate's) unless --temperature.")
@click.option("--tokenizer", type=click.Path(exists=True, file_okay=False),
              help="With --handler, for local-model handlers: the model's tokenizer directory (bfcl-eval counts "
                   "prompt tokens) [default: the handler's Hugging Face id].")
def run_bfcl(**kwargs) -> None:
    """BFCL v3 multi-turn, executed on bfcl-eval's backends and scored by its multi_turn_checker.

    Temperature 0.6 unless --temperature is given (the paper's setting). Requests are those of
    bfcl-eval's OpenAI function-calling handler (tools with their `response` schema) against a
    chat-completions endpoint; --handler plays through bfcl-eval's own handler for a model family.
    """
    benchenv.hand_over("bfcl")
    from astra_eval import bfcl

    options, inputs_given, config, selection = common(kwargs)
    categories = list(kwargs["categories"] or bfcl.CATEGORIES)
    seed = config.seed
    if kwargs["handler"]:
        if kwargs["oracle"]:
            raise click.BadParameter("--handler plays a model; --oracle replays the ground truth", param_hint="--oracle")
        run_item, model = handler_route(config, kwargs)
    else:
        run_item, model = endpoint_route(config, kwargs, seed)
    with item_source(options, inputs_given, lambda: bfcl.items(categories, seed=seed, **selection)) as options:
        run_items("astra-eval run bfcl", options, run_item, concurrency=config.concurrency,
                  item_timeout=kwargs["item_timeout"], model=model, seed=seed)


def handler_route(config: LLMConfig, kwargs: dict) -> tuple[Callable, str]:
    from astra_eval import bfcl_handler

    if not config.base_url:
        raise click.BadParameter("--handler needs the endpoint serving the model", param_hint="--base-url")
    kwargs.pop("top_p", None), kwargs.pop("top_k", None)
    temperature = config.temperature if config.temperature is not None else bfcl_handler.BFCL_GENERATE_TEMPERATURE
    handler = bfcl_handler.build(kwargs["handler"], base_url=config.base_url, api_key=config.api_key,
                                 temperature=temperature, tokenizer=kwargs["tokenizer"], model=config.model)
    return bfcl_handler.HandlerRun(handler), f"{kwargs['handler']} (bfcl-eval {type(handler).__name__})"


def endpoint_route(config: LLMConfig, kwargs: dict, seed: int | None) -> tuple[Callable, str]:
    from astra_eval import bfcl

    sampling = sampling_from(config, kwargs, bfcl.DEFAULT_TEMPERATURE)
    if kwargs["oracle"]:
        drop = kwargs["oracle_drop_rate"]
        model = f"oracle-drop-{drop:g}" if drop else "oracle"

        def agent_for(entry, ground_truth):
            return bfcl.Oracle(entry, ground_truth, drop_rate=drop, seed=seed or 0)

        return functools.partial(bfcl.run_item, agent_for=agent_for, max_turns=kwargs["max_turns"]), model
    model = asyncio.run(resolve_model(config))
    config.model = model
    run_item = WithClient(config, lambda client: functools.partial(
        bfcl.run_item, agent_for=lambda entry, truth: EndpointAgent(client, sampling, strip_tools=False),
        max_turns=kwargs["max_turns"], history_reasoning=kwargs["history_reasoning"]))
    return run_item, model


def user_options(f: Callable) -> Callable:
    """The user simulator's endpoint, configured apart from the model under test."""
    options = [
        click.option("--user-base-url", envvar="ASTRA_USER_LLM_BASE_URL",
                     help="User simulator endpoint [default: the agent's endpoint]."),
        click.option("--user-model", envvar="ASTRA_USER_LLM_MODEL",
                     help="User simulator model [default: the endpoint's first model]."),
        click.option("--user-api-key", envvar="ASTRA_USER_LLM_API_KEY", help="User simulator bearer token."),
        click.option("--user-temperature", type=float, default=0.0, show_default=True),
        click.option("--user-max-tokens", type=int),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def user_config(config: LLMConfig, kwargs: dict) -> LLMConfig:
    """The user simulator's LLM config: its own endpoint if given, else (once resolved) the agent's."""
    return LLMConfig(base_url=kwargs.pop("user_base_url"), model=kwargs.pop("user_model"),
                     api_key=kwargs.pop("user_api_key"),
                     temperature=kwargs.pop("user_temperature"), max_tokens=kwargs.pop("user_max_tokens"),
                     timeout=config.timeout, max_retries=config.max_retries, concurrency=config.concurrency)


async def resolve_endpoints(agent: LLMConfig, user: LLMConfig) -> None:
    """Fill in base URLs and model names, in place: the agent's endpoint (the embedded server when none is
    set), then the user's (the agent's endpoint when none is set)."""
    for config in (agent, user):
        if config is user and not user.base_url:
            user.base_url, user.api_key = agent.base_url, user.api_key or agent.api_key
        async with LLMClient(config) as client:
            config.model = await client.model()
            config.base_url = client.config.base_url


@run.command("tau2")
@run_options
@user_options
@click.option("--domain", "domains", multiple=True, type=click.Choice(["airline", "retail", "telecom"]),
              help="tau2 domains [default: all three].")
@click.option("--max-steps", type=int, default=200, show_default=True, help="tau2's limit on conversation steps.")
@click.option("--max-errors", type=int, default=10, show_default=True)
@click.option("--oracle", is_flag=True, help="Replay the ground-truth actions with a scripted user (harness check).")
@click.option("--oracle-drop-rate", type=float, default=0.0, help="With --oracle: leave out each action with this "
                                                                   "probability (seeded by --seed).")
def run_tau2(**kwargs) -> None:
    """tau2-bench: tau2's LLMAgent and user simulator, scored by tau2's evaluate_simulation.

    The agent is greedy (temperature 0) unless --temperature is given; 4 trials per task by default
    (the paper reports pass^1 over 4 trials; `astra-eval summary` shows pass^1..pass^4 and pass@4).
    Seeds as `tau2 run` sets them: base seed 300 unless --seed, tau2's per-trial seed to agent and user.
    A trial that raises scores 0 (tau2's agent_error, as `tau2 run --skip-failed-samples`).
    """
    benchenv.hand_over("tau2")
    from astra_eval import tau2

    options, inputs_given, config, selection = common(kwargs, trials=4)
    users = user_config(config, kwargs)
    sampling = sampling_from(config, kwargs, 0.0)
    domains = list(kwargs["domains"] or tau2.DOMAINS)
    seed = config.seed if config.seed is not None else tau2.DEFAULT_SEED
    steps = {"max_steps": kwargs["max_steps"], "max_errors": kwargs["max_errors"]}
    if kwargs["oracle"]:
        drop = kwargs["oracle_drop_rate"]
        model = f"oracle-drop-{drop:g}" if drop else "oracle"

        def simulate(domain, task, trial_seed):
            return tau2.simulate_oracle(domain, task, drop_rate=drop, seed=trial_seed, **steps)
    else:
        asyncio.run(resolve_endpoints(config, users))
        model = config.model
        agent = tau2.Endpoint(config.base_url, config.model, config.api_key, sampling.params())
        user = tau2.Endpoint(users.base_url, users.model, users.api_key,
                             Sampling(temperature=users.temperature, max_tokens=users.max_tokens).params())

        def simulate(domain, task, trial_seed):
            return tau2.simulate_llm(domain, task, agent, user, seed=trial_seed, **steps)

    run_item = functools.partial(tau2.run_item, simulate=simulate)
    with item_source(options, inputs_given, lambda: tau2.items(domains, seed=seed, **selection)) as options:
        run_items("astra-eval run tau2", options, run_item, concurrency=config.concurrency,
                  item_timeout=kwargs["item_timeout"], model=model, seed=seed)


@run.command("acebench")
@run_options
@user_options
@click.option("--split", "splits", multiple=True, type=click.Choice(["multi_turn", "multi_step"]),
              help="ACEBench agent splits [default: both].")
@click.option("--language", "languages", multiple=True, type=click.Choice(["en", "zh"]),
              help="Data language [default: en].")
@click.option("--oracle", is_flag=True, help="Replay ACEBench's milestone calls instead of querying a model.")
@click.option("--max-messages", type=int, default=40, show_default=True,
              help="Messages per run (agent, execution and user turns), ACEBench's max_dialog_turns.")
def run_acebench(**kwargs) -> None:
    """ACEBench agent tasks (multi_turn with an LLM user simulator, multi_step), on our implementation of its
    sandbox apps, scored by end-to-end (final state) and process (milestone) accuracy.

    Temperature 0.6 unless --temperature is given; 4 runs per task by default, averaged (the paper's).
    """
    from astra_eval.acebench import play

    options, inputs_given, config, selection = common(kwargs, trials=play.REPEATS)
    users = user_config(config, kwargs)
    sampling = sampling_from(config, kwargs, play.DEFAULT_TEMPERATURE)
    splits, languages = list(kwargs["splits"] or play.SPLITS), list(kwargs["languages"] or ["en"])
    seed = config.seed
    if kwargs["oracle"]:
        model = "oracle"
        run_item = functools.partial(
            play.run_item, agent_for=lambda task, answer: play.Oracle(answer["mile_stone"]),
            user_for=lambda task, lang: play.ScriptedUser(task["question"]), max_messages=kwargs["max_messages"])
    else:
        asyncio.run(resolve_endpoints(config, users))
        model = config.model
        user_params = Sampling(temperature=users.temperature, max_tokens=users.max_tokens).params()

        def make(client: LLMClient):
            user_client = client if users.base_url == config.base_url and users.model == config.model else \
                LLMClient(users)
            return functools.partial(
                play.run_item, agent_for=lambda task, answer: EndpointAgent(client, sampling),
                user_for=lambda task, lang: play.LLMUser(user_client, task["question"], lang, user_params),
                max_messages=kwargs["max_messages"])

        run_item = WithClient(config, make)
    with item_source(options, inputs_given,
                     lambda: play.items(languages, splits, seed=seed, **selection)) as options:
        run_items("astra-eval run acebench", options, run_item, concurrency=config.concurrency,
                  item_timeout=kwargs["item_timeout"], model=model, seed=seed)


@run.command("aime")
@run_options
@click.option("--year", "years", multiple=True, type=click.Choice(["aime2024", "aime2025"]),
              help="[default: both]")
@click.option("--setting", "settings", multiple=True, type=click.Choice(["topk20", "topk-1"]),
              help="Decoding settings: temperature 0.6, top-p 0.95, top-k 20 or none [default: both].")
@click.option("--samples", type=int, default=32, show_default=True, help="Samples per problem (one request, n=).")
def run_aime(**kwargs) -> None:
    """AIME 2024/2025: pass rate over --samples samples per problem under the paper's two decoding settings.

    Answers are read from the last \\boxed{} (else the last integer). Give thinking models room with
    --max-tokens (e.g. 32768).
    """
    from astra_eval import aime

    options, inputs_given, config, selection = common(kwargs)
    kwargs.pop("top_p"), kwargs.pop("top_k")  # the settings fix the sampling
    years, settings = list(kwargs["years"] or aime.YEARS), list(kwargs["settings"] or aime.SETTINGS)
    samples, max_tokens, seed = kwargs["samples"], config.max_tokens, config.seed
    model = asyncio.run(resolve_model(config))
    config.model = model
    run_item = WithClient(config, lambda client: functools.partial(aime.run_item, client=client, samples=samples,
                                                                   max_tokens=max_tokens))
    with item_source(options, inputs_given, lambda: aime.items(years, settings, seed=seed, **selection)) as options:
        run_items("astra-eval run aime", options, run_item, concurrency=config.concurrency,
                  item_timeout=kwargs["item_timeout"], model=model, seed=seed)


@main.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON instead of tables.")
@report_errors
def summary(results: tuple[str, ...], as_json: bool) -> None:
    """Tables shaped like the paper's (Tables 1-3) from eval_result files or directories, one row per model."""
    from astra_eval import report

    records = report.load(results)
    rows = report.by_model(records)
    if as_json:
        click.echo(json.dumps({model: {f"{g}: {c}": v for (g, c), v in figs.items()} for model, figs in rows.items()},
                              indent=2))
        return
    click.echo(report.render(rows))
    click.echo("\n" + report.render_errors(report.errors(records)))


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--label", "labels", multiple=True, help="A name per RUN, in order [default: file or directory name].")
@click.option("--png", type=click.Path(dir_okay=False), help="Write a grouped bar chart here (matplotlib: the `plots` extra).")
@report_errors
def compare(runs: tuple[str, ...], labels: tuple[str, ...], png: str | None) -> None:
    """Runs side by side (e.g. base vs SFT vs RL): a table per benchmark and, with --png, a bar chart.

    A RUN is an eval_result file or a directory of them; all its records count as one model.
    """
    from pathlib import Path

    from astra_eval import report

    if labels and len(labels) != len(runs):
        raise click.BadParameter(f"{len(labels)} labels for {len(runs)} runs", param_hint="--label")
    if png:
        report.pyplot()  # a missing `plots` extra fails before the runs are read
    names = list(labels) or [Path(run).stem if Path(run).is_file() else Path(run).name for run in runs]
    table = {name: report.figures(report.load([run])) for name, run in zip(names, runs, strict=True)}
    click.echo(report.render(table, label="Run"))
    if png:
        report.bar_chart(table, png)
        click.echo(f"\nbar chart: {png}", err=True)


if __name__ == "__main__":
    main()
