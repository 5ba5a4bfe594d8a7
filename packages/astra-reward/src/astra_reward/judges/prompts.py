"""The judges' prompts and output schemas, written for this project from the ASTRA paper's definitions.

Trajectory quality: §2.1.5, Eq. 2–10 (and appendix A.3, Example Prompt 2, for tool-call conciseness).
Q–A decomposition quality: §2.2.2, Eq. 13–21. Task quality: §2.1.3, Eq. 1.

A `Judgment` is one kind of question put to the judge: its system prompt (the definition and the
scale, from the paper), the reply format, and the JSON schema the reply must match. The system
prompt starts with "ASTRA judge: <title>" (logs and recorded test replies key on it); the user
message is the rendered material (filled into a `string.Template` below) followed by the reply
format again, so it is the last thing the model reads after a long transcript. Replies put a short
reason before the score, so a model reasons before it commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

THREE_LEVELS = (0.0, 0.5, 1.0)
BINARY = (0.0, 1.0)
RATINGS = (1.0, 2.0, 3.0, 4.0, 5.0)


def score_schema(scale: tuple[float, ...]) -> dict:
    """{"reason": str, "score": one of scale}."""
    return {"type": "object", "properties": {"reason": {"type": "string"}, "score": {"enum": list(scale)}},
            "required": ["score"]}


def items_schema(list_key: str, id_key: str, scale: tuple[float, ...]) -> dict:
    """{list_key: [{id_key, "reason", "score"}, ...]}: one verdict per item."""
    item = {"type": "object", "properties": {id_key: {"type": ["integer", "string"]}, "reason": {"type": "string"},
                                             "score": {"enum": list(scale)}},
            "required": [id_key, "score"]}
    return {"type": "object", "properties": {list_key: {"type": "array", "items": item}}, "required": [list_key]}


@dataclass(frozen=True)
class Judgment:
    name: str  # machine name, also the json_schema name sent to the endpoint
    title: str
    instructions: str
    reply_format: str
    schema: dict

    @property
    def system(self) -> str:
        return (f"ASTRA judge: {self.title}\n\nYou are a strict, fair evaluator of an AI assistant that uses tools."
                f"\n\n{self.instructions.strip()}\n\nReply with JSON only, no other text:\n{self.reply_format}")

    def user(self, material: str) -> str:
        return f"{material.rstrip()}\n\nReply with JSON only, no other text:\n{self.reply_format}"


def _three_level(name: str, title: str, instructions: str) -> Judgment:
    return Judgment(name, title, instructions, '{"reason": "<one short sentence>", "score": <0, 0.5 or 1>}',
                    score_schema(THREE_LEVELS))


# -- trajectory quality (paper §2.1.5) ----------------------------------------------------------------

QUERY_UNDERSTANDING = _three_level("query_understanding", "query understanding (QU)", """
Judge QUERY UNDERSTANDING. Read the user's request (the first USER message) and the assistant's
first response (the first ASSISTANT message, with any tool calls it makes). Does that first response
show a correct understanding of the request: its goal, its constraints, and the information the
user gave? The rest of the conversation is context only.
Score: 1 = correct understanding; 0.5 = partial (part of the request missed or misread);
0 = misunderstanding.""")

QUERY_PLANNING = _three_level("query_planning", "query planning (QP)", """
Judge INITIAL PLANNING. Look at the assistant's first response (the first ASSISTANT message: its
text and the tool calls it makes). Does it set out a plan — stated, or implied by its first tool
calls — that is complete and executable with the available tools to fulfil the user's request?
The rest of the conversation is context only.
Score: 1 = complete and executable plan; 0.5 = partially feasible (steps missing or some
unworkable); 0 = infeasible or wrong plan.""")

ROUND_UNDERSTANDING = _three_level("round_understanding", "tool-response understanding (TCU)", """
Judge TOOL-RESPONSE UNDERSTANDING for one tool-call round. The conversation ends with the round
being judged; the tool responses that immediately precede it are named below. Does this round
reflect a correct understanding of those tool responses: it reads the returned values correctly,
notices errors or empty results, and does not contradict or ignore what came back?
Score: 1 = correct understanding; 0.5 = partial; 0 = misunderstood or ignored.""")

ROUND_PLANNING = _three_level("round_planning", "tool-response-conditioned planning (TCP)", """
Judge TOOL-RESPONSE-CONDITIONED PLANNING for one tool-call round. The conversation ends with the
round being judged; the tool responses that immediately precede it are named below. Do this
round's tool calls correctly build on those responses: the right next tool(s), arguments taken
from the responses rather than invented, a sensible change of plan after an error or empty result?
Score: 1 = correct next step; 0.5 = partly right; 0 = wrong, unrelated or ignoring the responses.""")

TOOL_CONCISENESS = Judgment("tool_conciseness", "tool-call conciseness (TC)", """
Judge the COST EFFICIENCY of every tool call in the trajectory (calls are numbered #1, #2, ...).
Score each call 1 or 0:
- 1 (necessary): without it the user's goal could not be reached or only with difficulty; it
  follows from the context, its arguments match the need, and it obtains new information or
  advances the task at minimal cost.
- 0 (redundant): unrelated to the goal or substituting a different task; re-fetches information
  already obtained; wrong, malformed or hallucinated arguments (values the user never gave and no
  tool returned, or placeholder/example values); calls an undefined tool; retries after a clear
  (non-transient) error; splits into several calls what one call (e.g. a batch) could do.
Retrying after a transient failure (timeout, network) is necessary. Check where every argument
value came from before scoring. Give exactly one entry per call.""",
                            '{"calls": [{"index": 1, "reason": "<one short sentence>", "score": <0 or 1>}, ...]}',
                            items_schema("calls", "index", BINARY))

ANSWER_CORRELATION = _three_level("answer_correlation", "final-answer correlation (FA.Corr)", """
Judge FINAL-ANSWER RELEVANCE. Compare the user's request with the assistant's final answer only.
Does the final answer address what the user asked (the same question, all its parts, in the
user's language) rather than something else?
Score: 1 = fully addresses the request; 0.5 = partly; 0 = off-topic or no answer.""")

ANSWER_SUMMARY = _three_level("answer_faithfulness", "final-answer faithfulness (FA.Summ)", """
Judge FINAL-ANSWER FAITHFULNESS. Read the whole conversation and the assistant's final answer (the
last ASSISTANT message). Is the final answer a faithful summary of what happened: every fact it
states is supported by the tool responses or the user's messages, nothing is invented or
contradicts them, and the key results (including failures) are reported?
Score: 1 = faithful and complete; 0.5 = partly (omissions or minor unsupported claims);
0 = invented or contradicting facts.""")

TRAJECTORY_USER = Template("""Available tools:
$tools

Conversation (system prompt omitted):
$transcript
$focus""")

ROUND_FOCUS = Template("""
Round being judged: tool-call round $round of $rounds, message(s) $round_messages (calls $calls).
Tool responses immediately preceding it: message(s) $responses.""")

CORRELATION_USER = Template("""User's request:
$query

Assistant's final answer:
$answer""")

# -- Q–A decomposition quality (paper §2.2.2) -----------------------------------------------------------


def _per_sub_question(name: str, title: str, instructions: str) -> Judgment:
    return Judgment(name, title, instructions,
                    '{"items": [{"id": <sub-question id>, "reason": "<one short sentence>", "score": <0 or 1>}, ...]}',
                    items_schema("items", "id", BINARY))


DEPENDENCY_CONSISTENCY = _per_sub_question("qa_dependency_consistency", "dependency consistency (DC)", """
A main question has been decomposed into sub-questions, each with its answer and the list of
earlier sub-questions it depends on. Judge DEPENDENCY CONSISTENCY for every sub-question: score 1
if its dependency list is correct — every listed sub-question's answer is semantically and
logically needed to answer it, and it needs no earlier answer that is not listed — else 0.
Give exactly one entry per sub-question, by its id.""")

SUB_QUESTION_ATOMICITY = _per_sub_question("qa_atomicity", "sub-question atomicity (SA)", """
A main question has been decomposed into sub-questions. Judge ATOMICITY for every sub-question:
score 1 if it is a single indivisible step (one lookup, one computation or one judgment) that
cannot sensibly be split into smaller sub-questions, else 0 (e.g. it asks two things at once, or
bundles a lookup with a further computation). Give exactly one entry per sub-question, by its id.""")

SEQUENTIAL_RATIONALITY = _per_sub_question("qa_sequential_rationality", "sequential rationality (SR)", """
A main question has been decomposed into sub-questions listed in execution order, each with the
earlier sub-questions it depends on. Judge SEQUENTIAL RATIONALITY for every sub-question: score 1
if its place in the order is rational — it comes after everything it depends on, and it is a step
the solution really needs rather than a superfluous or unnatural step inserted only to add a hop —
else 0. Give exactly one entry per sub-question, by its id.""")

TASK_COMPLETENESS = Judgment("qa_task_completeness", "task completeness (TC)", """
A main question has been decomposed into sub-questions with their answers. Judge TASK
COMPLETENESS: score 1 if the sub-questions and their answers together are sufficient to derive
the answer to the main question (the given final answer follows from them), else 0.""",
                             '{"reason": "<one short sentence>", "score": <0 or 1>}', score_schema(BINARY))

QA_USER = Template("""Main question: $main_question
Final answer: $final_answer

Sub-questions in execution order:
$sub_questions""")

# -- task quality (paper §2.1.3) ----------------------------------------------------------------------

TASK_DIMENSIONS = ("question_quality", "scenario_realism", "tool_necessity")

TASK_QUALITY = Judgment("task_quality", "task quality", """
Judge a user task written for an assistant that has the tools listed below. Rate three dimensions,
each an integer from 1 to 5:
- question_quality: clarity, completeness and effectiveness as a realistic user query
  (1 = vague, ambiguous or missing what is needed to act; 3 = clear but generic; 5 = clear,
  complete and specific).
- scenario_realism: authenticity and plausibility of the scenario it describes
  (1 = contrived or implausible; 3 = plausible with artificial touches; 5 = indistinguishable from a
  real user's need).
- tool_necessity: whether using the tools is necessary and appropriate (1 = answerable without any
  tool, or the tools cannot help; 3 = tools help but are not essential; 5 = impossible without these
  tools, and they fit the task).""",
                        '{"question_quality": {"reason": "<one sentence>", "score": <1-5>}, '
                        '"scenario_realism": {"reason": "<one sentence>", "score": <1-5>}, '
                        '"tool_necessity": {"reason": "<one sentence>", "score": <1-5>}}',
                        {"type": "object", "properties": {name: score_schema(RATINGS) for name in TASK_DIMENSIONS},
                         "required": list(TASK_DIMENSIONS)})

TASK_USER = Template("""Available tools:
$tools
$chain
Task:
$question""")
