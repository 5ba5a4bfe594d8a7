"""What each `astra-qaenv` command does to one record: input shapes, configs and per-record functions.

The command line (`cli.py`) only declares them; `validate_instance`, `build_environment` and
`merge_environment` are stage functions as they stand. A library user calls the same functions:

    from astra_qaenv.stages import ProgrammaticConfig, programmatic_record
    instances = programmatic_record(entity, ProgrammaticConfig(per_entity=2), kb=load_kb())
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from astra_core.command import side_output
from astra_core.config import knob
from astra_core.jsonl import dumps
from astra_core.llm import LLMClient, LLMConfig, LLMError
from astra_core.records import add_provenance
from astra_core.schema import validate
from astra_core.stage import Rejected, Stage, StageError, StageOptions

from astra_qaenv.build import BuildConfig
from astra_qaenv.export_config import ExportConfig
from astra_qaenv.kb import KBError, KnowledgeBase, load_kb
from astra_qaenv.merge import MergeConfig
from astra_qaenv.programmatic import ProgrammaticConfig, synthesize_from, why_nothing
from astra_qaenv.synthesize import SynthesisConfig, synthesize_row
from astra_qaenv.verify import VerifierConfig

if TYPE_CHECKING:
    from astra_qaenv.mixing import ToolPool

# -- input shapes that are not record kinds (typed: a wrong type is a reject, never an instance) ------------

KNOWLEDGE_ROW = {
    "title": "knowledge row",
    "description": "An ASTRA knowledge row: {domain, knowledge_corpus} (questions are generated) or "
                   "{question, domain} (the question is decomposed).",
    "type": "object",
    "anyOf": [{"required": ["knowledge_corpus"]}, {"required": ["question"]}],
    "properties": {"id": {"type": "string"}, "domain": {"type": "string"},
                   "knowledge_corpus": {"type": "string"}, "question": {"type": "string"}},
}

BUILT_ENVIRONMENT = {
    "title": "built environment",
    "description": "An environment written by `astra-qaenv build-env` (or `merge`): with the instance it answers "
                   "(`instance`), which export turns into the sample's prompt and job.",
    "allOf": [{"$ref": "https://astra-toolkit.dev/schemas/environment.json"}],
    "required": ["instance"],
}

MERGEABLE_ENVIRONMENT = {
    "title": "built environment with its parts",
    "description": "An environment written by `astra-qaenv build-env`: with the instance it answers (`instance`) and "
                   "its tools' parts (`subenvs`), which merge groups and rebuilds.",
    "allOf": [{"$ref": "https://astra-toolkit.dev/schemas/environment.json"}],
    "required": ["instance", "subenvs"],
}

ENTITY_ROW = {
    "title": "entity row",
    "description": "A start entity of the knowledge base's walks: a row of its entities.jsonl (only `id` is read).",
    "type": "object",
    "required": ["id"],
    "properties": {"id": {"type": "string"}, "type": {"type": "string"}, "name": {"type": "string"}},
}


# -- synthesis ----------------------------------------------------------------------------------------

async def synthesize_record(row: dict, config: SynthesisConfig, llm: LLMClient, stage: Stage) -> list[dict]:
    """ASTRA knowledge rows ({domain, knowledge_corpus} or {question, domain}) -> qa_instance (LLM).

    Instances the LLM wrote that break the decomposition format go to --rejects one by one; the counts on stderr
    give them apart from the rows rejected ('outputs made and dropped').
    """
    kept, dropped = await synthesize_row(llm, row, config)
    for instance, reason in dropped:
        stage.drop(instance, reason)
    if not kept:
        raise Rejected(f"all {len(dropped)} instance(s) the LLM wrote were dropped (see their rejects)")
    return kept


@contextlib.contextmanager
def open_kb(config: ProgrammaticConfig) -> Iterator[KnowledgeBase]:
    try:
        yield load_kb(config.kb)
    except KBError as exc:
        raise StageError(str(exc)) from exc


def programmatic_record(entity: dict, config: ProgrammaticConfig, kb: KnowledgeBase) -> list[dict]:
    """Entity rows (walk starts) -> qa_instance by walking the KB's relations (no LLM).

    \b
    astra-qaenv sample-data entities | astra-qaenv programmatic > qa.jsonl
    """
    instances = synthesize_from(kb, entity, config)
    if not instances:
        raise Rejected(why_nothing(kb, entity, config))
    return instances


# -- environments: the sandbox settings join the synthesis knobs -------------------------------------------

@dataclass(frozen=True)
class BuildEnvConfig(BuildConfig, VerifierConfig):
    """`build-env`: the synthesis knobs and the sandbox that verifies every call."""


@dataclass(frozen=True)
class MergeEnvConfig(MergeConfig, VerifierConfig):
    """`merge`: the merge knobs and the sandbox that re-verifies every call."""


# -- export: a whole-input pass (the tool pool is every input's tools) --------------------------------------

@dataclass
class ExportCommandConfig(ExportConfig):
    embedder: str = knob("auto", "Tool-doc embeddings: local all-MiniLM-L6-v2 (extra `local`), or the endpoint's "
                                 "/v1/embeddings (auto: local when installed).", choices=("auto", "local", "endpoint"))
    embedding_model: str | None = knob(None, "Model name for --embedder endpoint (unset: the endpoint's first).")
    tool_pool: list[str] = knob([], "JSONL of environments / tool servers / tools forming the distractor pool "
                                    "(none: the inputs' tools).", path=True)
    gold_trajectories: str | None = knob(None, "Also write one trajectory per sample solving it with the verified "
                                               "calls (SFT warm start) to this file.", path=True)


@contextlib.contextmanager
def spooled_stdin() -> Iterator[str]:
    """stdin copied to a temporary file whose path is yielded for a first pass; the copy is then stdin again,
    so a second pass reading '-' still names its lines <stdin>:N."""
    original = sys.stdin
    with tempfile.NamedTemporaryFile(suffix=".jsonl", prefix="astra-qaenv-stdin-") as spool:
        shutil.copyfileobj(original.buffer, spool)
        spool.flush()
        spool.seek(0)
        sys.stdin = io.TextIOWrapper(spool)
        try:
            yield spool.name
        finally:
            sys.stdin.detach()
            sys.stdin = original


@contextlib.contextmanager
def open_tool_pool(config: ExportCommandConfig, options: StageOptions, llm_config: LLMConfig | None) -> Iterator[ToolPool]:
    """The distractor pool: the --tool-pool files, or else every input's tools (read before the stage reads
    them: stdin is spooled, and stays spooled while the stage runs), with their embeddings for bands mixing."""
    from astra_qaenv.embed import make_embedder, tool_document
    from astra_qaenv.export import load_pool  # numpy: imported when exporting

    spool = "-" in options.inputs and not config.tool_pool
    with spooled_stdin() if spool else contextlib.nullcontext("-") as stdin_copy:
        if config.tool_pool:
            pool = load_pool(config.tool_pool)
        else:  # a bad line is left to the stage, which rejects it or stops naming it
            pool = load_pool([stdin_copy if path == "-" else path for path in options.inputs], kind="environment",
                             skip_bad=True)
        if config.mode == "bands" and pool.tools:
            try:
                embed = make_embedder(config.embedder, llm_config, config.embedding_model)
                pool.embeddings = embed([tool_document(t) for t in pool.tools])
            except (LLMError, RuntimeError) as exc:
                raise StageError(f"tool-doc embeddings: {exc}") from exc
        yield pool


@side_output  # (on Ray: written where the samples are, not by each actor)
@contextlib.contextmanager
def open_gold(config: ExportCommandConfig) -> Iterator[IO[bytes] | None]:
    if not config.gold_trajectories:
        yield None
        return
    with open(config.gold_trajectories, "wb") as handle:
        yield handle


def export_record(env: dict, config: ExportCommandConfig, pool: ToolPool, gold: IO[bytes] | None,
                  stage: Stage) -> dict:
    """environment -> rl_sample (tools + mixed distractors, job, prompt) [+ gold trajectories].

    Reads its inputs twice (the distractor pool is their tools, unless --tool-pool): stdin is spooled.
    A sample whose environment's verified calls do not earn the full F1 reward is rejected."""
    from astra_qaenv.export import export_sample, solvable

    stage.stats.setdefault("tool pool", f"{len(pool)} unique tools in {len(set(pool.domains))} domains")
    sample = add_provenance(export_sample(env, pool, config), stage.command, seed=config.seed)
    trajectory = solvable(validate(sample, "rl_sample"), env)
    if gold is not None:
        add_provenance(trajectory, stage.command, seed=config.seed)
        gold.write(dumps(validate(trajectory, "trajectory")))
    return sample
