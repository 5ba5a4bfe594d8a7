"""Hypothesis strategies that build valid records of every kind."""

from __future__ import annotations

import json

from hypothesis import strategies as st

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
ids = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_/", min_size=1, max_size=24)
names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | text
meta = st.fixed_dictionaries({"provenance": st.lists(st.fixed_dictionaries(
    {"command": st.sampled_from(["astra-toolgraph walk", "astra-qaenv export"]), "seed": st.none() | st.integers(0, 99)}),
    max_size=2)})


@st.composite
def tools(draw, min_size=0):
    tool_names = draw(st.lists(names, min_size=min_size, max_size=4, unique=True))
    return [{"type": "function", "function": {"name": n, "description": draw(text), "parameters": {
        "type": "object", "properties": {p: {"type": "string"} for p in draw(st.lists(names, max_size=3, unique=True))}}}}
        for n in tool_names]


@st.composite
def messages(draw):
    out = [{"role": "system", "content": draw(text)}, {"role": "user", "content": draw(text)}]
    for i in range(draw(st.integers(0, 3))):
        call_id = f"call_{i}"
        args = json.dumps(draw(st.dictionaries(names, json_scalars, max_size=3)))
        out.append({"role": "assistant", "content": draw(st.none() | text),
                    "tool_calls": [{"id": call_id, "type": "function", "function": {"name": draw(names), "arguments": args}}]})
        out.append({"role": "tool", "tool_call_id": call_id, "content": draw(text)})
    out.append({"role": "assistant", "content": draw(text)})
    return out


@st.composite
def decomposition(draw):
    n = draw(st.integers(1, 5))
    steps = []
    for i in range(1, n + 1):
        deps = draw(st.lists(st.integers(1, i - 1), max_size=2, unique=True)) if i > 1 else []
        steps.append({"_uuid": i, "hop_level": 1 + len(deps), "sub_question": draw(text), "is_parallel": not deps,
                      "dependency": deps or None, "sub_answer": draw(text)})
    return steps


def record(kind: str):
    base = {"id": ids, "meta": meta}
    fields = {
        "tool_server": {"name": text, "tools": tools(), "transport": st.sampled_from(
            [{"kind": "doc_only"}, {"kind": "stdio", "command": "uvx", "args": ["mcp-server-time"]},
             {"kind": "http", "url": "http://127.0.0.1:9/mcp"}])},
        "tool_graph": {"server_id": ids, "nodes": st.lists(names, max_size=4),
                       "edges": st.lists(st.fixed_dictionaries({"src": names, "dst": names,
                                                                 "weight": st.floats(0.01, 100)}), max_size=4)},
        "tool_chain": {"server_id": ids, "tools": st.lists(names, min_size=1, max_size=5), "task": st.none() | text},
        "task": {"server_id": ids, "question": text},
        "trajectory": {"messages": messages(), "tools": tools()},
        "qa_instance": {"main_question": text, "final_answer": text, "decomposition_trace": decomposition(),
                        "scenario_type": st.sampled_from(["Single-Hop", "Parallel Single-Hop", "Multi-Hop",
                                                          "Parallel Multi-Hop"])},
        "environment": {"instance_id": ids, "tools": tools(min_size=1), "code": text},
        "rl_sample": {"messages": messages(), "tools": tools(), "environment": st.fixed_dictionaries({"code": text}),
                      "reward": st.fixed_dictionaries({"kind": st.sampled_from(["f1", "recall", "precision"])}),
                      "job": st.lists(st.fixed_dictionaries({"question": text, "answer": text}), max_size=3)},
        "rollout": {"sample_id": ids, "messages": messages(), "reward": st.floats(0, 1)},
        "eval_result": {"benchmark": st.sampled_from(["bfcl", "tau2"]), "category": text, "item_id": ids,
                        "trial": st.integers(0, 8), "success": st.booleans(), "score": st.floats(0, 1)},
        "plan": {"domain_id": ids, "stream": ids, "iteration": st.integers(0, 5), "synthesis_plan": text,
                 "evaluation_rules": text},
    }[kind]
    return st.fixed_dictionaries({**base, **fields})
