"""LLM joint synthesis of (task, tool chain) pairs per server (paper §2.1.2), and the walk records."""

from __future__ import annotations

from dataclasses import dataclass

from astra_core.config import knob
from astra_core.llm import LLMClient
from astra_core.records import new_record, stable_id
from astra_core.stage import Rejected

from astra_toolgraph import prompts
from astra_toolgraph.replies import chains_from_text, json_or_text


@dataclass
class SynthesisConfig:
    chains_per_request: int = knob(4, "(task, chain) pairs asked for in one request.", minimum=1)
    requests: int = knob(1, "Requests per server, with distinct seeds (the multiset C(s) grows with both).",
                         minimum=1)
    max_chain_length: int = knob(8, "Longer proposed chains are cut to this many tools.", minimum=1)


def chain_record(server_id: str, tools: list[str], *, origin: str, task: str | None, parent: dict, salt=None,
                 **extra) -> dict:
    """A tool_chain record; `salt` tells apart equal chains that were drawn separately (the multiset)."""
    record_id = stable_id(server_id, tools, task, origin, salt, prefix="chain-")
    extra = {k: v for k, v in extra.items() if v is not None}
    return new_record(record_id, parent=parent, server_id=server_id, tools=tools, task=task, origin=origin, **extra)


def clean_chain(proposed: list, tool_names: set[str], max_length: int) -> tuple[list[str], list[str]]:
    """The proposed chain restricted to known tool names, and the unknown names it used."""
    names = [n.strip() for n in proposed if isinstance(n, str)]
    unknown = [n for n in names if n not in tool_names]
    return [n for n in names if n in tool_names][:max_length], unknown


async def synthesize_chains(llm: LLMClient, server: dict, config: SynthesisConfig, seed: int | None) -> list[dict]:
    """tool_chain records (origin "llm") for one server, or Rejected when no reply held a usable chain."""
    names = {t["function"]["name"] for t in server["tools"]}
    records, problems = [], []
    for request in range(config.requests):
        reply, text = await json_or_text(llm, prompts.chain_synthesis(server, config.chains_per_request),
                                         prompts.CHAINS_SCHEMA, "chains", seed=None if seed is None else seed + request)
        if reply is not None:
            proposals, parse = reply["chains"], "json"
        else:
            proposals, parse = [{"tools": c} for c in chains_from_text(text, names)], "text"
            if not proposals:
                problems.append(f"reply {request} is neither JSON nor lines naming tools: {text[:120]!r}")
        for index, proposal in enumerate(proposals):
            tools, unknown = clean_chain(proposal.get("tools") or [], names, config.max_chain_length)
            if unknown:
                problems.append(f"unknown tools {unknown}")
            if not tools:
                continue
            records.append(chain_record(server["id"], tools, origin="llm", task=proposal.get("task") or None,
                                        parent=server, salt=[request, index], unknown_tools=unknown or None,
                                        parse=parse))
    if not records:
        raise Rejected("no usable chain synthesized: " + ("; ".join(problems)[:500] or "empty replies"))
    return records
