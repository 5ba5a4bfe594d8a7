"""Programmatic Q–A synthesis (no LLM): walk the relations of a knowledge base.

From a start entity, a *chain* is a walk of lookups (`the capital of Valdoria` -> `the population
of Varno`): each lookup is one sub-question answered by one generated table-lookup tool. Chains
compose into the paper's four scenario types:

- Single-Hop: one lookup;
- Multi-Hop: one chain of 2+ lookups, each depending on the previous answer;
- Parallel Single-Hop: independent lookups (the same field for several entities, or several
  fields of one entity);
- Parallel Multi-Hop: two chains with the same field pattern from two entities, joined by a
  comparison leaf that needs no tool (or, when the last field is not numeric, just the two chains).

Every lookup step carries its `tool_source` (the tool spec and table rows) and its `tool_call`,
so `build-env` renders and sandbox-verifies the environment without an LLM.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from astra_core.config import check, knob
from astra_core.records import new_record, stable_id

from astra_qaenv.kb import Field, KnowledgeBase
from astra_qaenv.lookup import lookup_source
from astra_qaenv.trace import SCENARIOS, depth


@dataclass(frozen=True)
class Lookup:
    """One hop: a field of a subject entity and its value (an entity dict for relations)."""

    field: Field
    subject: dict
    value: object

    @property
    def answer(self) -> str:
        return self.value["name"] if isinstance(self.value, dict) else str(self.value)


@dataclass
class ProgrammaticConfig:
    """Knobs of `astra-qaenv programmatic`."""

    kb: str | None = knob(None, "Knowledge-base directory (entities.jsonl, relations.jsonl, schema.jsonl); "
                                "unset: the bundled sample.", path=True)
    min_hops: int = knob(1, "Hop budget (hop levels: depth of the decomposition), lower bound.",
                         minimum=1)
    max_hops: int = knob(3, "Hop budget, upper bound.", minimum=1)
    scenarios: list[str] = knob(list(SCENARIOS), "Scenario types to build.")
    per_entity: int = knob(1, "Instances (of distinct scenario types) started from each input entity.",
                           minimum=1)
    table_rows: int = knob(4, "Extra table rows each lookup tool holds besides the asked one (-1: the whole table).",
                           minimum=-1)
    seed: int = knob(0, "Seed of the random walks.")
    tries: int = knob(24, "Random walks tried per scenario type before giving up.", minimum=1)

    def validate(self) -> None:
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        check(bool(self.scenarios) and not unknown, "scenarios",
              f"unknown scenario type(s) {unknown}; choose from {', '.join(SCENARIOS)}")
        check(self.min_hops <= self.max_hops, "min_hops", f"{self.min_hops} is above max_hops {self.max_hops}")


def _rng(config: ProgrammaticConfig, *parts) -> random.Random:
    return random.Random(stable_id(config.seed, *parts))


def _chain(kb: KnowledgeBase, start: dict, length: int, rng: random.Random, *, numeric_end: bool = False,
           pattern: list[Field] | None = None) -> list[Lookup] | None:
    """A walk of `length` lookups from `start` (following `pattern` when given), or None."""
    hops: list[Lookup] = []
    current, seen = start, {start["id"]}
    for i in range(length):
        last = i == length - 1
        if pattern is not None:
            options = [pattern[i]]
        else:
            options = list(kb.fields.get(current["type"], {}).values())
            if not last:
                options = [f for f in options if f.is_relation]
            elif numeric_end:
                options = [f for f in options if f.compare]
        rng.shuffle(options)
        for f in options:
            value = kb.value(current, f)
            if value is None or (isinstance(value, dict) and value["id"] in seen):
                continue
            if f.compare and last and numeric_end and not isinstance(value, int | float):
                continue
            hops.append(Lookup(f, current, value))
            if isinstance(value, dict):
                current = value
                seen.add(value["id"])
            break
        else:
            return None
    return hops


def _nested_phrase(hops: list[Lookup]) -> str:
    """`the population of the capital of Valdoria` for the chain capital -> population."""
    text = hops[0].subject["name"]
    for hop in hops:
        text = hop.field.phrase.format(name=text)
    return text


def _subject_phrase(hops: list[Lookup]) -> str:
    """The phrase naming the entity the chain's last lookup reads (`the capital of Valdoria`)."""
    return _nested_phrase(hops[:-1]) if len(hops) > 1 else hops[0].subject["name"]


def _chain_question(hops: list[Lookup]) -> str:
    """The question a whole chain answers: its last field asked of the nested subject phrase."""
    return hops[-1].field.question(_subject_phrase(hops))


def _join_questions(questions: list[str]) -> str:
    """`What is A, who is B, and what is C?`"""
    if len(questions) == 1:
        return questions[0]
    parts = [q.rstrip("?") for q in questions]
    parts = [parts[0]] + [p[:1].lower() + p[1:] for p in parts[1:]]
    return ", ".join(parts[:-1]) + ", and " + parts[-1] + "?"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


# -- building the trace ----------------------------------------------------------------------------

def _steps(kb: KnowledgeBase, chains: list[list[Lookup]], config: ProgrammaticConfig, rng: random.Random):
    trace: list[dict] = []
    finals: list[dict] = []
    for chain in chains:
        previous = None
        for level, hop in enumerate(chain, start=1):
            step = {
                "_uuid": len(trace) + 1, "hop_level": level, "sub_question": hop.field.question(hop.subject["name"]),
                "is_parallel": False, "dependency": [previous["_uuid"]] if previous else None,
                "sub_answer": hop.answer, "needs_tool": True,
                "tool_source": _tool_source(kb, hop, config, rng),
                "tool_call": {"name": hop.field.tool, "arguments": {hop.field.param: hop.subject["name"]}},
            }
            trace.append(step)
            previous = step
        finals.append(previous)
    return trace, finals


def _tool_source(kb: KnowledgeBase, hop: Lookup, config: ProgrammaticConfig, rng: random.Random) -> dict:
    table = kb.table(hop.field)
    others = sorted(name for name in table if name != hop.subject["name"])
    if config.table_rows >= 0:
        others = rng.sample(others, min(config.table_rows, len(others)))
    rows = {name: table[name] for name in [hop.subject["name"], *others]}
    return lookup_source(hop.field, rows)


def _mark_parallel(trace: list[dict]) -> None:
    widths: dict[int, int] = {}
    for step in trace:
        widths[step["hop_level"]] = widths.get(step["hop_level"], 0) + 1
    for step in trace:
        step["is_parallel"] = widths[step["hop_level"]] > 1


def _instance(kb: KnowledgeBase, chains: list[list[Lookup]], config: ProgrammaticConfig, rng: random.Random,
              *, compare: bool) -> tuple[dict, str, str]:
    trace, finals = _steps(kb, chains, config, rng)
    facts = [_sentence(f"{hop.field.phrase.format(name=hop.subject['name'])} is {hop.answer}.")
             for chain in chains for hop in chain]
    if compare:
        a, b = chains[0][-1], chains[1][-1]
        f = a.field
        first_wins = (a.value < b.value) if f.lower_wins else (a.value > b.value)
        winner = (a if first_wins else b).subject["name"]
        trace.append({
            "_uuid": len(trace) + 1, "hop_level": len(chains[0]) + 1,
            "sub_question": f.compare.format(a=a.subject["name"], b=b.subject["name"]),
            "is_parallel": False, "dependency": [step["_uuid"] for step in finals], "sub_answer": winner,
            "needs_tool": False,
        })
        question = f.compare.format(a=_subject_phrase(chains[0]), b=_subject_phrase(chains[1]))
        answer = " ".join(facts) + f" So the answer is {winner}."
    else:
        question = _join_questions([_chain_question(chain) for chain in chains])
        answer = " ".join(facts)
    _mark_parallel(trace)
    return {"main_question": question, "final_answer": answer, "decomposition_trace": trace}, question, answer


# -- the four scenario types -------------------------------------------------------------------------

def _single(kb, start, config, rng):
    chain = _chain(kb, start, 1, rng)
    return [chain] if chain else None, False


def _multi(kb, start, config, rng):
    lengths = list(range(max(2, config.min_hops), config.max_hops + 1))
    rng.shuffle(lengths)
    for length in lengths:
        chain = _chain(kb, start, length, rng)
        if chain:
            return [chain], False
    return None, False


def _parallel_single(kb, start, config, rng):
    if rng.random() < 0.5:  # one field for several entities: homogeneous sub-questions (merge material)
        chain = _chain(kb, start, 1, rng)
        peers = [e for e in kb.of_type(start["type"]) if e["id"] != start["id"]]
        rng.shuffle(peers)
        chains = [chain] if chain else []
        wanted = rng.choice([2, 3])
        for peer in peers:
            if len(chains) in (0, wanted):
                break
            other = _chain(kb, peer, 1, rng, pattern=[chain[0].field])
            if other:
                chains.append(other)
        if len(chains) >= 2:
            return chains, False
    fields = [f for f in kb.fields.get(start["type"], {}).values() if kb.value(start, f) is not None]
    if len(fields) < 2:
        return None, False
    chosen = rng.sample(fields, min(len(fields), rng.choice([2, 3])))
    return [[Lookup(f, start, kb.value(start, f))] for f in chosen], False


def _parallel_multi(kb, start, config, rng):
    """Two chains with one field pattern; a comparison leaf when the last field is numeric."""
    lengths = list(range(max(1, config.min_hops - 1), config.max_hops))
    rng.shuffle(lengths)
    for length in lengths:
        for numeric in (True, False):
            chain = _chain(kb, start, length, rng, numeric_end=numeric)
            if not chain or (not numeric and length < 2):
                continue
            peers = [e for e in kb.of_type(start["type"]) if e["id"] != start["id"]]
            rng.shuffle(peers)
            for peer in peers:
                other = _chain(kb, peer, length, rng, pattern=[hop.field for hop in chain])
                if not other or other[-1].answer == chain[-1].answer:
                    continue
                if {hop.subject["id"] for hop in chain} & {hop.subject["id"] for hop in other}:
                    continue
                return [chain, other], numeric
    return None, False


BUILDERS = {"Single-Hop": _single, "Multi-Hop": _multi, "Parallel Single-Hop": _parallel_single,
            "Parallel Multi-Hop": _parallel_multi}


def synthesize_from(kb: KnowledgeBase, start: dict, config: ProgrammaticConfig) -> list[dict]:
    """Up to `per_entity` instances of distinct scenario types starting at `start` (may be empty)."""
    if start.get("id") not in kb.entities:
        return []
    entity = kb.entities[start["id"]]
    order = list(config.scenarios)
    offset = int(stable_id(config.seed, entity["id"], length=8), 16) % len(order)
    order = order[offset:] + order[:offset]  # spread scenario types across start entities
    out: list[dict] = []
    seen_questions: set[str] = set()
    for scenario in order:
        rng = _rng(config, entity["id"], scenario)
        for _ in range(config.tries):
            chains, compare = BUILDERS[scenario](kb, entity, config, rng)
            if not chains:
                continue
            body, question, _ = _instance(kb, chains, config, rng, compare=compare)
            hops = depth(body["decomposition_trace"])
            if not config.min_hops <= hops <= config.max_hops or question in seen_questions:
                continue
            seen_questions.add(question)
            record = new_record(stable_id(config.seed, entity["id"], scenario, question, prefix="qa-"),
                                domain=entity["domain"], scenario_type=scenario, **body, knowledge=None,
                                synthesis={"method": "programmatic", "start": entity["id"],
                                           "hop_budget": [config.min_hops, config.max_hops], "seed": config.seed})
            out.append(record)
            break
        if len(out) >= config.per_entity:
            break
    return out


def why_nothing(kb: KnowledgeBase, start: dict, config: ProgrammaticConfig) -> str:
    """A reject reason for a start entity no instance could be built from."""
    if start.get("id") not in kb.entities:
        return f"entity {start.get('id')!r} is not in the knowledge base"
    entity = kb.entities[start["id"]]
    fields = kb.fields.get(entity["type"], {})
    relations = sorted(f.name for f in fields.values() if f.is_relation and kb.value(entity, f) is not None)
    return (f"no {' / '.join(config.scenarios)} instance within the hop budget {config.min_hops}-{config.max_hops} "
            f"starts at {entity['type']} {entity['name']!r} (relations it can follow: "
            f"{', '.join(relations) or 'none'}; {config.tries} walks tried per scenario)")
