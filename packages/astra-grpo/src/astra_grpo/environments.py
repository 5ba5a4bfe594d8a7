"""Environment kinds: what an rl_sample's `environment` names, and how a run plays it.

    {"environment": {"code": "...", "requirements": []}}        code in an astra-sandbox session (`code`)
    {"environment": {"tau2": {"domain": "airline", ...}}}       a tau2-bench domain (`tau2`)
    {"environment": {"openenv": {"base_url": "http://..."}}}    an OpenEnv server (`openenv`)
    {"environment": {"NAME": {...}}}                             a kind registered under NAME

Each kind declares, once, what the episode runner and the commands ask of it: how to check a sample before a run
(`check`, and `check_resources` against the run's resources), the run's resources (`open`: a pool, a worker, a client), an episode's session (`session`: a context
manager of an object with `call(name, arguments, call_id)` returning a result with `.output`, `.ok`, `.kind`, and
`done`), what happens once it is open (`begin`: OpenEnv puts its reset's task into the prompt), its own reward
(`reward`, for the reward kinds it names in `rewards`) and its state (`state`, for the `state` reward).

A kind of one's own is an `EnvironmentKind` registered by name (`register_environment`) or by the entry point
group `astra_grpo.environments` (`name = "package.module:kind"`, a kind or a function returning one); `train` and
`rollout` play it with nothing changed in astra_grpo.
"""

from __future__ import annotations

import abc
import contextlib
import sys
import threading
from typing import Any

from astra_core.schema import RecordError

ENTRY_POINTS = "astra_grpo.environments"


class EnvironmentKind(abc.ABC):
    """How a run plays one kind of environment; every method but `session` has a default."""

    name: str = ""
    rewards: tuple[str, ...] = ()  # reward kinds this environment gives itself (reward.kind / --reward)
    opens_at_start: bool = False  # the session opens before the first turn (else at the first tool call)
    checks_resources: bool = False  # `check_resources` asks the run's resources (an OpenEnv server) of each sample
    has_user_device: bool = False  # `user_device` runs a user simulator's own tools in the session (tau2)

    def check(self, sample: dict) -> None:  # noqa: B027 - by default nothing more to check
        """RecordError naming the field unless the sample can be played (after the schema and the common checks);
        needs nothing but the sample."""

    def check_resources(self, sample: dict, resources) -> None:  # noqa: B027 - by default nothing to ask
        """RecordError naming the field unless the run's resources can play the sample (`checks_resources`)."""

    def open(self, config, *, eager: bool):
        """The run's resources for this kind, a context manager (None: none needed). `eager`: a training run,
        which opens them before its first step; a rollout opens them at its first sample."""
        return None

    @abc.abstractmethod
    def session(self, resources, sample: dict):
        """A context manager of one episode's session."""

    def begin(self, session, sample: dict) -> list[dict] | None:
        """The prompt's messages once the session is open, when the environment changes them (None: unchanged)."""
        return None

    def reward(self, resources, episode) -> tuple[float, dict]:
        """(reward, components) by the environment itself, for a reward kind in `rewards` (a kind naming none is
        never asked)."""
        raise TypeError(f"environment kind {self.name} names the rewards {self.rewards} but gives no reward()")

    def state(self, resources, episode) -> dict:
        """The environment's state at the episode's end, for the `state` reward."""
        if episode.session is not None and hasattr(episode.session, "state"):
            return episode.session.state()
        raise RecordError(f"environment {self.name} gives no state to verify", record_id=episode.sample.get("id"),
                          field="reward.kind")

    def user_device(self, session):
        """How a user simulator runs the user's own tools in this session (tau2's phone); None: it cannot."""
        return None


# -- the built-in kinds --------------------------------------------------------------------------------------------

class CodeSession:
    """An astra-sandbox session under the common call signature (the sandbox needs no call id)."""

    done = False

    def __init__(self, session):
        self.inner = session

    def call(self, name: str, arguments, call_id: str = ""):
        return self.inner.call(name, arguments)

    def state(self) -> dict:
        return self.inner.state()


class SandboxCode(EnvironmentKind):
    """The environment's code, run in a warm, jailed astra-sandbox session per episode."""

    name = "code"

    def check(self, sample: dict) -> None:
        if not sample["environment"]["code"].strip():
            raise RecordError("empty environment code", record_id=sample.get("id"), field="environment.code")

    def open(self, config, *, eager: bool):
        return open_sandbox_pool(config.sandbox_pool_size, jail=config.sandbox_jail,
                                 call_timeout_s=config.sandbox_call_timeout_s)

    @contextlib.contextmanager
    def session(self, resources, sample: dict):
        environment = sample["environment"]
        with resources.session(environment["code"], requirements=environment.get("requirements") or []) as session:
            yield CodeSession(session)

    def state(self, resources, episode) -> dict:
        if episode.session is not None:
            return episode.session.state()
        with self.session(resources, episode.sample) as session:  # never touched: its initial state
            return session.state()


class Tau2Domain(EnvironmentKind):
    """A tau2-bench task's live environment, in astra-grpo's tau2 worker; tau2's evaluator scores it."""

    name = "tau2"
    rewards = ("tau2",)
    has_user_device = True

    def check(self, sample: dict) -> None:
        from astra_grpo.tau2 import DOMAINS

        if sample["environment"]["tau2"]["domain"] not in DOMAINS:
            raise RecordError(f"not a tau2 domain ({' | '.join(DOMAINS)})", record_id=sample.get("id"),
                              field="environment.tau2.domain")

    def open(self, config, *, eager: bool):
        from astra_grpo.tau2 import Tau2Pool

        return Tau2Pool(config.tau2_python, lazy=not eager)  # a rollout's worker starts at its first tau2 sample

    def session(self, resources, sample: dict):
        return resources.session(sample["environment"]["tau2"])

    def reward(self, resources, episode) -> tuple[float, dict]:
        from astra_grpo.tau2 import tau2_reward

        return tau2_reward(resources, episode.sample, episode.messages, episode.finish_reason, episode.session)

    def user_device(self, session):
        return lambda name, arguments, call_id: session.call(name, arguments, call_id, requestor="user").output


class OpenEnvServer(EnvironmentKind):
    """An OpenEnv environment server, through OpenEnv's own clients (astra_grpo.openenv_sessions)."""

    name = "openenv"
    rewards = ("openenv",)
    opens_at_start = True  # the reset comes before the first turn: its task may belong in the prompt
    checks_resources = True

    def check(self, sample: dict) -> None:
        if (sample["reward"]["kind"] == "openenv" and not sample["tools"]
                and not sample["environment"]["openenv"].get("finish")):
            raise RecordError("a sample without tools reaches its OpenEnv server only through finish (the policy's "
                              "answer as the closing action); without it the reward would be the reset's alone",
                              record_id=sample.get("id"), field="environment.openenv.finish")

    def check_resources(self, sample: dict, resources) -> None:
        resources.check(sample)  # the server answers, lists the sample's tools and takes its finish

    def open(self, config, *, eager: bool):
        return open_openenv_pool(config.openenv_timeout_s, f"{config_command(config)} (samples with "
                                                           "environment.openenv)")

    def session(self, resources, sample: dict):
        return resources.session(sample["environment"]["openenv"], tools=bool(sample["tools"]))

    def begin(self, session, sample: dict) -> list[dict] | None:
        from astra_grpo.openenv_sessions import with_task

        template = sample["environment"]["openenv"].get("task")
        return None if template is None else with_task(sample["messages"], session.task(template))

    def reward(self, resources, episode) -> tuple[float, dict]:
        from astra_grpo.openenv_sessions import openenv_reward

        return openenv_reward(episode.sample, episode.messages, episode.session)

    def state(self, resources, episode) -> dict:
        raise RecordError("the state reward reads the environment's state, which an OpenEnv server does not give: "
                          "use its own reward (openenv) or F1 over the job", record_id=episode.sample.get("id"),
                          field="reward.kind")


def config_command(config) -> str:
    from astra_grpo.config import RolloutConfig

    return "astra-grpo rollout" if isinstance(config, RolloutConfig) else "astra-grpo train"


# -- the registry -------------------------------------------------------------------------------------------------

_KINDS: dict[str, EnvironmentKind] = {kind.name: kind for kind in (SandboxCode(), Tau2Domain(), OpenEnvServer())}
_loaded_entry_points = False


def register_environment(kind: EnvironmentKind, name: str | None = None) -> None:
    """Make `kind` playable as `{"environment": {name: {...}}}` (name: the kind's own `name`)."""
    name = name or kind.name
    if not name:
        raise ValueError("an environment kind needs a name")
    kind.name = name
    _KINDS[name] = kind


def environment_kinds() -> dict[str, EnvironmentKind]:
    """Every kind: the built-in ones, those registered, and those of installed packages' entry points."""
    global _loaded_entry_points
    if not _loaded_entry_points:
        from importlib.metadata import entry_points

        _loaded_entry_points = True
        for point in entry_points(group=ENTRY_POINTS):
            if point.name not in _KINDS:
                loaded = point.load()
                register_environment(loaded() if callable(loaded) and not isinstance(loaded, EnvironmentKind)
                                     else loaded, point.name)
    return _KINDS


def kind_name(sample: dict) -> str:
    """The environment kind a sample names: `code` for code, else the key of its `environment` that names one."""
    environment = sample["environment"]
    kinds = environment_kinds()
    for key in environment:
        if key != "requirements" and key in kinds:
            return key
    raise RecordError(f"no environment kind named by {sorted(environment)} (known: {', '.join(sorted(kinds))})",
                      record_id=sample.get("id"), field="environment")


def kind_of(sample: dict) -> EnvironmentKind:
    return environment_kinds()[kind_name(sample)]


def plays_openenv(sample: dict) -> bool:
    """The sample's environment is an OpenEnv server (environment.openenv)."""
    return kind_name(sample) == "openenv"


def runs_code(sample: dict) -> bool:
    """The sample's environment is code, played in an astra-sandbox session."""
    return kind_name(sample) == "code"


# -- a run's environments -----------------------------------------------------------------------------------------

class Environments:
    """The environments of a run: each kind's resources, opened at its first sample (or, for a training run, by
    `prepare` before the first step), and closed with the run. `pools` gives resources made elsewhere (a test's
    sandbox pool), which stay open."""

    def __init__(self, config=None, *, pools: dict[str, Any] | None = None, eager: bool = False):
        self.config = config
        self.eager = eager
        self.resources: dict[str, Any] = {name: pool for name, pool in (pools or {}).items() if pool is not None}
        self._owned = contextlib.ExitStack()
        self._lock = threading.RLock()

    @classmethod
    def of(cls, environments) -> Environments:
        """An Environments as given, or one around a bare sandbox pool (`pool.session(code, requirements)`)."""
        return environments if isinstance(environments, Environments) else cls(pools={"code": environments})

    def pool(self, name: str):
        """The resources of a kind, opened on first use (episodes' threads may ask at once: opened once)."""
        with self._lock:
            if name not in self.resources:
                if self.config is None:
                    raise RuntimeError(f"no resources for {name} environments were given")
                opened = environment_kinds()[name].open(self.config, eager=self.eager)
                self.resources[name] = None if opened is None else self._owned.enter_context(opened)
            return self.resources[name]

    def prepare(self, samples: list[dict]) -> None:
        """Open the resources of every kind the samples play (a training run, before its first step)."""
        for name in dict.fromkeys(kind_name(sample) for sample in samples):
            self.pool(name)

    def check(self, sample: dict) -> None:
        """RecordError naming the field unless the run's resources of the sample's kind can play it (an OpenEnv
        server that answers, with its tools)."""
        name = kind_name(sample)
        kind = environment_kinds()[name]
        if kind.checks_resources:
            kind.check_resources(sample, self.pool(name))

    def session(self, sample: dict):
        name = kind_name(sample)
        return environment_kinds()[name].session(self.pool(name), sample)

    def close(self) -> None:
        self._owned.close()

    def __enter__(self) -> Environments:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def open_sandbox_pool(size: int, *, jail: bool = True, call_timeout_s: float = 5.0):
    """A `SessionPool` (use as a context manager): one isolated session per episode."""
    from astra_sandbox import SandboxConfig, SessionPool

    if not jail:
        print("astra-grpo: WARNING: environments run WITHOUT nsjail (--no-sandbox-jail); their code is "
              "not isolated from this machine", file=sys.stderr)
    return SessionPool(size=size, config=SandboxConfig(jail=jail, call_timeout_s=call_timeout_s))


def open_openenv_pool(timeout_s: float, needed_by: str):
    """An `OpenEnvPool` (use as a context manager): one OpenEnv session per episode. Without the `openenv` extra,
    MissingExtra saying in one line what to install."""
    from astra_core.extras import require

    require("openenv.core", extra="astra-grpo[openenv]", needed_by=needed_by)
    from astra_grpo.openenv_sessions import OpenEnvPool

    return OpenEnvPool(timeout_s)
