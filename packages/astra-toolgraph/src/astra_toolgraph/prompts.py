"""Every prompt of the SFT pipeline, written from the paper's definitions (§2.1, appendix A.3).

Each builder returns OpenAI chat messages; the JSON schema the reply must match sits next to it.
"""

from __future__ import annotations

import json


def chat(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def tool_lines(tools: list[dict], *, with_parameters: bool = True) -> str:
    """One line per tool: name, description and (optionally) its arguments."""
    lines = []
    for tool in tools:
        function = tool["function"]
        line = f"- {function['name']}: {function.get('description', '')}"
        if with_parameters:
            properties = (function.get("parameters") or {}).get("properties") or {}
            required = set((function.get("parameters") or {}).get("required") or [])
            args = [f"{name}{'' if name in required else '?'}: {(spec or {}).get('type', 'any')}"
                    for name, spec in properties.items()]
            line += f" ({', '.join(args)})" if args else " (no arguments)"
        lines.append(line)
    return "\n".join(lines)


def server_header(server: dict) -> str:
    return f"Server: {server['name']}\nDescription: {server.get('description') or '(none)'}"


# -- §2.1.2 joint task + chain synthesis ----------------------------------------------------------
CHAINS_SCHEMA = {
    "type": "object",
    "properties": {"chains": {"type": "array", "items": {
        "type": "object",
        "properties": {"task": {"type": "string"}, "tools": {"type": "array", "items": {"type": "string"}}},
        "required": ["task", "tools"]}}},
    "required": ["chains"],
}


def chain_synthesis(server: dict, count: int) -> list[dict]:
    return chat("You design realistic multi-step tasks for tool-using assistants.", (
        f"{server_header(server)}\nTools:\n{tool_lines(server['tools'])}\n\n"
        f"Write {count} different tasks a user of this server could ask for, each with the chain of tools "
        "(in call order) that solves it. Use only the tool names above. Order the tools so that every "
        "call's required arguments come from the task itself or from the results of earlier calls.\n"
        'Reply with JSON only: {"chains": [{"task": "...", "tools": ["tool_a", "tool_b"]}]}'))


# -- §2.1.2 verification: task-chain coherence (appendix A.3, Example Prompt 1) -------------------
BACK_TRANSLATION_SCHEMA = {
    "type": "object",
    "properties": {"valid": {"type": "boolean"}, "query": {"type": "string"}},
    "required": ["valid", "query"],
}
COHERENCE_SCHEMA = {
    "type": "object",
    "properties": {"coherent": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["coherent", "reason"],
}


def chain_to_query(server: dict, chain: list[str]) -> list[dict]:
    """Is a tool chain meaningful, and what user request does it serve? (paper Example Prompt 1)."""
    tools = json.dumps([t["function"] for t in server["tools"]], ensure_ascii=False)
    return chat("You are a helpful AI assistant.", (
        f"You have the following tools:\n{tools}\n\n"
        f"These tools are designed for the following scenario:\n{server.get('description') or server['name']}\n\n"
        "I will provide you with a tool invocation chain (the sequence of tool calls). Your task is:\n"
        "1. Determine whether this tool invocation chain is meaningful and valid (whether it can accomplish "
        "a reasonable task).\n"
        "2. If it is meaningful, extract the original user intent or query corresponding to this chain.\n"
        "3. Output the result strictly in this JSON format: "
        '{"valid": true, "query": "Check the weather in Beijing."}\n'
        "valid: whether the chain is valid; query: the user's request, empty if invalid. "
        "Do not include any extra explanation.\n\n"
        f"Input:\n<ToolInvocationChain>{json.dumps(chain)}</ToolInvocationChain>\n\nOutput:"))


def task_chain_coherence(server: dict, task: str, chain: list[str]) -> list[dict]:
    return chat("You check whether a plan of tool calls fits a user's task.", (
        f"{server_header(server)}\nTools:\n{tool_lines(server['tools'])}\n\n"
        f"Task: {task}\nPlanned tool calls, in order: {' -> '.join(chain)}\n\n"
        "Is the task well posed and sensible, and does this sequence of calls plausibly solve it? "
        'Reply with JSON only: {"coherent": true, "reason": "..."}'))


# -- §2.1.3 task construction (replies are numbered lines: any model writes those) ----------------
LIST_FORMAT = "Write each request on its own line, numbered 1., 2., ...; write nothing else."


def chain_tasks(server: dict, chain: list[str], count: int, hint: str | None) -> list[dict]:
    chain_tools = [t for name in chain for t in server["tools"] if t["function"]["name"] == name]
    return chat("You write realistic requests that users send to a tool-using assistant.", (
        f"{server_header(server)}\nWorkflow: {' -> '.join(chain)}\n{tool_lines(chain_tools, with_parameters=False)}\n"
        + (f"It serves a task like: {hint}\n" if hint else "") +
        f"\nWrite {count} realistic request(s) a user might send whose solution follows this workflow. Include "
        f"the concrete values the calls need (names, paths, queries, dates); do not name the tools. {LIST_FORMAT}"))


def server_tasks(server: dict, count: int) -> list[dict]:
    return chat("You write realistic requests that users send to a tool-using assistant.", (
        f"{server_header(server)}\nTools:\n{tool_lines(server['tools'], with_parameters=False)}\n\n"
        f"Write {count} realistic request(s) a user might send to an assistant with these tools: requests that "
        f"need the tools, with the concrete values they need. {LIST_FORMAT}"))


# -- §2.1.3 augmentation --------------------------------------------------------------------------
INTENT_SCHEMA = {
    "type": "object",
    "properties": {"same_intent": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["same_intent", "reason"],
}
AXES = {
    "diversity": ("Rewrite the request with different wording, preferences or background context, keeping "
                  "exactly the same goal and the same information needs."),
    "complexity": ("Make the request more demanding: add a constraint, an implicit reference or a follow-up need, "
                   "while keeping the core goal unchanged."),
    "persona": "Rewrite the request as it would be written by this user: {persona}. Keep the same goal.",
}


def augment(question: str, axis: str, persona: str | None, language: str) -> list[dict]:
    instruction = AXES[axis].format(persona=persona or "")
    return chat("You rewrite user requests for a tool-using assistant.", (
        f"Original request:\n{question}\n\n{instruction} Write it in the same language as the original "
        f"(language code: {language}). Reply with the rewritten request only."))


def intent_check(original: str, rewrite: str) -> list[dict]:
    return chat("You compare two user requests.", (
        f"Original: {original}\nRewrite: {rewrite}\n\nDoes the rewrite keep the original's intent and "
        "logical requirements (it may add detail or constraints, but not change the goal)? "
        'Reply with JSON only: {"same_intent": true, "reason": "..."}'))


# -- §2.1.4 rollout and the tool emulator ---------------------------------------------------------
AGENT_SYSTEM = ("You are a helpful assistant with access to tools. Call tools when they help answer the user's "
                "request, use their results, and finish with a direct answer.")


def emulate_call(server: dict, tool: dict, arguments: dict, history: list[dict]) -> list[dict]:
    """The emulator's request: the tool's documentation, the session so far, and the call to answer."""
    function = tool["function"]
    past = "\n".join(f"{i + 1}. {h['name']}({json.dumps(h['arguments'], ensure_ascii=False)}) -> {h['output']}"
                     for i, h in enumerate(history)) or "(no earlier calls)"
    output = tool.get("output_schema")
    return chat((
        "You emulate a tool server. Given a tool's documentation and a call, reply with the output the real "
        "tool would return: realistic, specific, and consistent with every earlier call and output of this "
        "session (an entity created earlier exists; values read earlier do not change unless a call "
        "changed them). Reply with the output only, as JSON."), (
        f"{server_header(server)}\nTool: {function['name']}: {function.get('description', '')}\n"
        f"Arguments schema: {json.dumps(function.get('parameters'), ensure_ascii=False)}\n" +
        (f"Output schema: {json.dumps(output, ensure_ascii=False)}\n" if output else "") +
        f"Earlier calls in this session:\n{past}\n\n"
        f"Call: {function['name']}({json.dumps(arguments, ensure_ascii=False)})\nOutput:"))
