"""A gold answer rewritten as a model might write it: the same value in another notation
(`same_value_rewrites`), or a value one step off (`changed_value_rewrites`), each in the
formats models end a reply with (`ANSWER_FORMATS`).

A grader that is right pays every rewrite of the first kind and none of the second,
whatever the gold; no label is needed, so any set of real gold answers checks it
(``benchmarks/grader_rewrites.py`` runs them over ``../shared/data``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ._changed_value import CHANGED_VALUE_REWRITES
from ._same_value import SAME_VALUE_REWRITES, Rewrite

__all__ = [
    "ANSWER_FORMATS",
    "CHANGED_VALUE_REWRITES",
    "GOLD_FORMATS",
    "SAME_VALUE_REWRITES",
    "changed_value_rewrites",
    "same_value_rewrites",
]

ANSWER_FORMATS: dict[str, Callable[[str], str]] = {
    "boxed": lambda v: f"So the answer is $\\boxed{{{v}}}$.",
    "prose": lambda v: f"The final answer is ${v}$.",
    "json": lambda v: json.dumps({"reasoning": "Worked out above.", "answer": v}),
    "gsm8k": lambda v: f"Adding the parts gives the total.\n#### {v}",
}
"""How a reply states its answer: ``boxed`` is rStar2's format (both grading modes);
``prose``, ``json`` (what evaluations that ask for JSON get, its backslashes escaped)
and ``gsm8k`` (GSM8K's ``####`` line, math written as plain text) are lenient mode's only."""


GOLD_FORMATS: dict[str, Callable[[str], str]] = {
    "dollars": lambda g: f"${g}$",
    "inline_math": lambda g: f"\\({g}\\)",
    "display_math": lambda g: f"\\[{g}\\]",
    "boxed": lambda g: f"\\boxed{{{g}}}",
}
"""How data sets write a gold answer besides bare: the same gold to a grader."""


def same_value_rewrites(gold: str) -> list[tuple[str, str]]:
    """(name, answer) for each notation of the gold's own value that applies to it."""
    return _applied(SAME_VALUE_REWRITES, gold)


def changed_value_rewrites(gold: str) -> list[tuple[str, str]]:
    """(name, answer) for each value one step off the gold's that applies to it."""
    return _applied(CHANGED_VALUE_REWRITES, gold)


def _applied(rewrites: dict[str, Rewrite], gold: str) -> list[tuple[str, str]]:
    return [(name, new) for name, rewrite in rewrites.items() if (new := rewrite(gold)) is not None and new != gold]
