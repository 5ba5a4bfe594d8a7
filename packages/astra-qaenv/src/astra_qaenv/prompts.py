"""Every LLM prompt of astra-qaenv, written from the paper's definitions (§2.2, appendix A.3).

Each prompt is a template filled with `str.format`; each has the JSON schema its reply must match
(the client asks for schema-constrained output and re-asks with the error when a reply breaks it).
"""

from __future__ import annotations

SCENARIO_DEFINITIONS = """\
Scenario types (the structure of the decomposition):
1. Single-Hop: exactly one sub-question.
2. Parallel Single-Hop: several independent sub-questions that can be answered in parallel (no dependencies).
3. Multi-Hop: a chain: sub-question i+1 needs the answer of sub-question i.
4. Parallel Multi-Hop: both independent parts that can run in parallel and parts that depend on earlier answers."""

TRACE_RULES = """\
Rules for the decomposition_trace:
- Each sub_question is a natural question a user could ask, answerable by ONE call of an atomic API tool \
(a database query, a service lookup, a calculation on data). sub_answer holds only the final value, no reasoning.
- Be specific: real names, dates, amounts and places; never "a certain company" or "some day".
- _uuid numbers the steps 1, 2, 3, ... in order. dependency lists the _uuids of earlier steps whose answers \
this step directly needs, or null when it needs none.
- hop_level is the layer: 1 for steps without dependencies, otherwise one more than the highest hop_level \
among its dependencies. Steps on the same layer can run in parallel: mark them is_parallel true.
- Only a final step that nothing depends on may be a purely linguistic step (comparing, summarizing, \
recommending); every other step must need a tool.
- If a knowledge corpus is given, answers must come from it; otherwise invent specific, plausible data."""

INSTANCE_SCHEMA = {
    "type": "object",
    "required": ["scenario_type", "main_question", "final_answer", "decomposition_trace"],
    "properties": {
        "scenario_type": {"enum": ["Single-Hop", "Parallel Single-Hop", "Multi-Hop", "Parallel Multi-Hop"]},
        "main_question": {"type": "string", "minLength": 1},
        "final_answer": {"type": "string", "minLength": 1},
        "decomposition_trace": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object",
                "required": ["_uuid", "hop_level", "sub_question", "is_parallel", "dependency", "sub_answer"],
                "properties": {
                    "_uuid": {"type": ["integer", "string"]},
                    "hop_level": {"type": "integer", "minimum": 1},
                    "sub_question": {"type": "string", "minLength": 1},
                    "is_parallel": {"type": "boolean"},
                    "dependency": {"type": ["array", "null"], "items": {"type": ["integer", "string"]}},
                    "sub_answer": {"type": ["string", "number", "boolean"]},
                },
            },
        },
    },
}

UNCONDITIONAL = """\
You build tool-use training data for language models. Write {count} user question(s) in the domain below, \
each with its answer and its decomposition into sub-questions (question-answer pairs) that together solve it.

Domain: {domain}
Knowledge corpus: {corpus}
Hop levels: between {min_hops} and {max_hops}

""" + SCENARIO_DEFINITIONS + """

Each question must need between {min_hops} and {max_hops} hop levels; pick the scenario type that fits the \
domain and corpus. Use different entities and situations in each question.

""" + TRACE_RULES + """

Reply with only a JSON list of {count} object(s):
[{{"scenario_type": "Multi-Hop", "main_question": "...", "final_answer": "...",
  "decomposition_trace": [{{"_uuid": 1, "hop_level": 1, "sub_question": "...", "is_parallel": false,
                           "dependency": null, "sub_answer": "..."}}, ...]}}]"""

UNCONDITIONAL_SCHEMA = {"type": "array", "minItems": 1, "items": INSTANCE_SCHEMA}

CONDITIONAL = """\
You build tool-use training data for language models. Answer the user question below and decompose how \
you answer it into sub-questions (question-answer pairs).

Domain: {domain}
Knowledge corpus: {corpus}
Question: {question}

""" + SCENARIO_DEFINITIONS + """

Classify the question as one of these types; use a sensible number of hops (no more and no fewer than \
the question needs).

""" + TRACE_RULES + """

Reply with only one JSON object:
{{"scenario_type": "...", "main_question": "{question_json}", "final_answer": "...",
 "decomposition_trace": [{{"_uuid": 1, "hop_level": 1, "sub_question": "...", "is_parallel": false,
                          "dependency": null, "sub_answer": "..."}}, ...]}}"""

NECESSITY = """\
Decide for each sub-question below whether answering it requires calling an external tool.

A tool is needed to look up facts or records (databases, search, services), to read live or private data, \
or to compute on such data. No tool is needed for purely linguistic operations on information already at \
hand: evaluation, summarization, recommendation, advice, ranking, matching, or format transformation.

Main question: {main_question}
Sub-questions:
{steps}

Reply with only JSON: {{"judgments": [{{"_uuid": 1, "needs_tool": true, "reason": "..."}}, ...]}} with one \
judgment per sub-question."""

NECESSITY_SCHEMA = {
    "type": "object", "required": ["judgments"],
    "properties": {"judgments": {"type": "array", "items": {
        "type": "object", "required": ["_uuid", "needs_tool"],
        "properties": {"_uuid": {"type": ["integer", "string"]}, "needs_tool": {"type": "boolean"},
                       "reason": {"type": "string"}}}}},
}

TOOL_SCHEMA = {
    "type": "object", "required": ["name", "description", "parameters"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "description": {"type": "string"},
        "parameters": {"type": "object", "required": ["type", "properties"],
                       "properties": {"type": {"const": "object"}, "properties": {"type": "object"},
                                      "required": {"type": "array", "items": {"type": "string"}}}},
    },
}

TOOL_SPEC = """\
Design the API tool that answers the sub-question below. Write its documentation in OpenAI function format: \
a snake_case name, a description of what it does and returns, and JSON-schema parameters (types, \
descriptions, which are required). The tool must be general: the sub-question's specific values are \
arguments, not part of the name.

Sub-question: {question}
Its answer: {answer}
{context}
Reply with only JSON: {{"analysis": "...", "tool": {{"name": "...", "description": "...", "parameters": \
{{"type": "object", "properties": {{...}}, "required": [...]}}}}}}"""

TOOL_SPEC_SCHEMA = {"type": "object", "required": ["tool"],
                    "properties": {"analysis": {"type": "string"}, "tool": TOOL_SCHEMA}}

SCALING = """\
Make this tool more expressive without changing what it answers: add useful optional parameters \
(filters, units, output options) or widen the value ranges of existing parameters (more enum values). \
Keep the same name and keep every existing required parameter with the same type.

Tool: {tool}

Reply with only JSON: {{"analysis": "...", "tool": {{...the refined tool...}}}}"""

CALL = """\
Write the call of this tool that answers the sub-question: the tool's name and the arguments, which must \
match the tool's parameters.

Tool: {tool}
Sub-question: {question}
{context}
Reply with only JSON: {{"analysis": "...", "call": {{"name": "{name}", "arguments": {{...}}}}}}"""

CALL_SCHEMA = {"type": "object", "required": ["call"],
               "properties": {"analysis": {"type": "string"},
                              "call": {"type": "object", "required": ["name", "arguments"],
                                       "properties": {"name": {"type": "string"},
                                                      "arguments": {"type": "object"}}}}}

IMPLEMENT = """\
Implement the tool below as one Python 3 function, following its documentation, the question-answer \
pairs and the call statement.

1. Take the function name and parameters (names, types, defaults) exactly from the tool document.
2. Infer from the question-answer pairs how inputs map to outputs and how results are formatted.
3. The call statement must return a result that contains the expected answer as a substring (also when \
parameters keep their defaults); for any input the result should be determined by the input. Keep the \
data the tool needs inside the code (e.g. a dict), and simulate extra fields the document implies.
4. Handle wrong types, missing or invalid values and other foreseeable errors with clear, stable error \
messages instead of crashing.
Use only the Python standard library: no network, no files, no third-party packages.

Tool document: {tool}
Question-answer pairs:
{pairs}
Call statement: {call}

Reply with only JSON: {{"analysis": "...", "function": "def {name}(...):\\n    ..."}}"""

IMPLEMENT_SCHEMA = {"type": "object", "required": ["function"],
                    "properties": {"analysis": {"type": "string"}, "function": {"type": "string", "minLength": 1}}}

GROUP = """\
Group these sub-questions by intent: sub-questions are homogeneous when they ask for the same kind of \
information with different parameter values (e.g. the weather in two cities), so one tool can answer all of \
them. Every sub-question belongs to exactly one group; a sub-question like no other forms a group alone.

Sub-questions:
{steps}

Reply with only JSON: {{"clusters": [{{"_uuids": [1, 3], "intent_summary": "...", "reason": "..."}}, ...]}}"""

GROUP_SCHEMA = {"type": "object", "required": ["clusters"],
                "properties": {"clusters": {"type": "array", "items": {
                    "type": "object", "required": ["_uuids"],
                    "properties": {"_uuids": {"type": "array", "items": {"type": ["integer", "string"]}},
                                   "intent_summary": {"type": "string"}, "reason": {"type": "string"}}}}}}

MERGE = """\
One tool must now also answer a new sub-question. Extend the tool's implementation: keep the function \
name and parameters, and extend its data (e.g. add entries to its tables) so that every call listed below \
still returns its expected answer and the new sub-question is answered too. Then write the call of the \
extended tool for the new sub-question.

Tool document: {tool}
Current implementation:
{code}
Calls that must keep working (call -> expected answer):
{calls}
New sub-question: {question}
Its answer: {answer}
(For reference, a separate tool written for it: {other_code})

Use only the Python standard library. Reply with only JSON: {{"analysis": "...", "function": "def {name}(...):\\n \
...", "call": {{"name": "{name}", "arguments": {{...}}}}}}"""

MERGE_SCHEMA = {"type": "object", "required": ["function", "call"],
                "properties": {"analysis": {"type": "string"}, "function": {"type": "string", "minLength": 1},
                               "call": CALL_SCHEMA["properties"]["call"]}}

SYSTEM_PROMPT = """\
You are a helpful assistant that solves the user's request by calling the available tools. Break the \
request into steps, call a tool for every fact you need (independent calls can go in one turn), use each \
tool's result for the next step, and call only the tools you need. When you have everything, reply with \
the final answer."""
