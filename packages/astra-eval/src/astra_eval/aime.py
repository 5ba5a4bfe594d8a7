"""AIME 2024 and 2025: n samples per problem under the paper's two decoding settings.

Settings (ASTRA §3.3.2): temperature 0.6, top-p 0.95, and top-k 20 or no top-k (-1). A problem's
score is its pass rate, the share of its n samples (32 by default) whose extracted answer equals
the reference integer; a year's figure is the mean over its problems, and the reported AIME figure
is the mean of the two settings.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

from astra_eval.results import eval_result, make_item, trial_seed

YEARS = ("aime2024", "aime2025")
SETTINGS = {
    "topk20": {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
    "topk-1": {"temperature": 0.6, "top_p": 0.95, "top_k": -1},
}
SAMPLES = 32
PROMPT = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."

_INTEGER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@functools.cache
def problems(year: str) -> dict[str, dict]:
    path = resources.files("astra_eval") / "data" / "aime" / f"{year}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {row["id"]: row for row in rows}


def items(years: list[str], settings: list[str], *, limit: int | None, ids: list[str] | None, trials: int,
          seed: int | None) -> list[dict]:
    selected = []
    for year in years:
        names = [name for name in problems(year) if not ids or name in ids][:limit]
        selected += [make_item("aime", year, name, trial, trial_seed(seed, trial), setting=setting)
                     for setting in settings for trial in range(trials) for name in names]
    return selected


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}), braces balanced; None if there is none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    open_at = text.find("{", start)
    if open_at < 0:
        return None
    depth = 0
    for position in range(open_at, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:position]
    return None


def _clean(text: str) -> str:
    text = re.sub(r"\\(?:text|mathrm|textbf|mathbf)\{([^}]*)\}", r"\1", text)
    for noise in ("$", "\\!", "{,}", "\\,", ","):
        text = text.replace(noise, "")
    return text.strip()


def _integer(text: str) -> int | None:
    """`text` as an integer if it is exactly one (17, 073, 17.0); else None."""
    match = re.fullmatch(r"-?\d+(?:\.0+)?", text)
    return int(float(match.group(0))) if match else None


def extract_answer(text: str) -> int | None:
    """The model's final answer: the last \\boxed{} if there is one (an answer only if it holds an
    integer), else the last integer in the text."""
    boxed = last_boxed(text)
    if boxed is not None:
        return _integer(_clean(boxed))
    found = _INTEGER.findall(text)
    return _integer(found[-1].replace(",", "")) if found else None


def grade(texts: list[str], reference: str) -> list[dict]:
    expected = int(reference)
    graded = []
    for text in texts:
        answer = extract_answer(text)
        graded.append({"answer": answer, "correct": answer == expected, "text": text})
    return graded


# A later request for the samples still missing gets seed + this times its number (the same seed would give the
# same samples again).
SEED_STRIDE = 1_000_003


async def sample(client, messages: list[dict], params: dict, samples: int) -> tuple[list[dict], int]:
    """`samples` choices: from one request with n = samples, topped up by further requests for the rest when the
    endpoint sends fewer (llama.cpp's and TGI's servers ignore n and send one). Returns (choices, requests)."""
    choices: list[dict] = []
    requests = 0
    while len(choices) < samples:
        seed = params["seed"] if params["seed"] is None else params["seed"] + requests * SEED_STRIDE
        reply = await client.chat(messages, **{**params, "n": samples - len(choices), "seed": seed})
        requests += 1
        choices += reply.choices[:samples - len(choices)]
    return choices, requests


async def run_item(item: dict, client, *, samples: int, max_tokens: int | None) -> dict:
    """All samples of one problem under one setting (one request with n = samples, if the endpoint honours n)."""
    problem = problems(item["category"])[item["item_id"]]
    messages = [{"role": "user", "content": PROMPT.format(problem=problem["problem"])}]
    params = {**SETTINGS[item["setting"]], "seed": item.get("seed"), "max_tokens": max_tokens}
    choices, requests = await sample(client, messages, params, samples)
    graded = grade([choice["message"].get("content") or "" for choice in choices], problem["answer"])
    for graded_sample, choice in zip(graded, choices, strict=True):
        graded_sample["finish_reason"] = choice.get("finish_reason")
    rate = sum(s["correct"] for s in graded) / len(graded)
    details = {"reference": problem["answer"], "setting": item["setting"], "sampling": SETTINGS[item["setting"]],
               "n": len(graded), "requests": requests, "pass_rate": rate, "samples": graded}
    return eval_result(item, success=rate >= 0.5, score=rate, messages=messages, details=details)
