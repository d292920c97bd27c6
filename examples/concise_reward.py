"""A reward of your own: right answers score 1, minus a penalty for rambling.

Use it with ``[reward] function = "examples.concise_reward:concise"``.  It is a plain
function, so it runs in the grader's worker processes, with the timeout and the
replacement of a hung or crashed worker that the math grader has.
"""

from __future__ import annotations

from rstar2_async.reward import answers_match, extract_answer
from rstar2_async.types import Problem

BUDGET_CHARS = 2000
"""Responses up to this long are not penalised."""


def concise(response_text: str, problem: Problem) -> float:
    answer = extract_answer(response_text)
    if answer is None or not answers_match(answer, problem.answer):
        return 0.0
    overrun = max(0, len(response_text) - BUDGET_CHARS) / BUDGET_CHARS
    return max(0.5, 1.0 - 0.5 * overrun)
