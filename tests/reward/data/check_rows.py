"""What the readers of other projects' grader tests (check_readers.py) share: the rows
they make, the names a source gives its columns, and how a literal becomes a gold
answer, a prediction or a verdict."""

from __future__ import annotations

import ast
from dataclasses import dataclass

GOLD_NAMES = ("gold", "ground_truth", "answer", "reference", "test_in", "solution")
PRED_NAMES = ("pred", "prediction", "completions", "test_out", "completion", "model_response")
LABEL_NAMES = ("expected", "result", "expected_correct")
VERDICT_WORDS = {"correct": True, "incorrect": False, "C": True, "I": False}
"""Verdicts some graders return as words: inspect_ai's statuses and its C/I scores."""


@dataclass(frozen=True)
class Shape:
    """How one source names its cases: which parameter, key or list holds the gold
    answer, the prediction and the label, and (for tests that assert a grader call
    with literal arguments) the grader's name and the positions of gold and prediction."""

    gold: tuple[str, ...] = GOLD_NAMES
    pred: tuple[str, ...] = PRED_NAMES
    label: tuple[str, ...] = LABEL_NAMES
    call: tuple[str | tuple[str, ...], int, int] | None = None
    """The grader's name (or the names of the graders one file tests with the same
    argument order), and the positions of gold and prediction among its arguments."""
    verdict: str = ".status"
    """How a test body's asserted verdict expression ends, for tests without a label column."""
    wrong: float = 0
    """The reward the source's grader gives a wrong answer (SkyRL's AIME environment: -1)."""


@dataclass(frozen=True)
class Row:
    gold: str
    prediction: str
    label: bool
    line: int
    test: str
    settings: str


def literal(node: ast.AST) -> object:
    """A literal's value (``r"..."``, numbers, ``[[{"content": x}]]``), else raise ValueError."""
    return ast.literal_eval(node)


def as_text(value: object) -> str | None:
    """A gold or prediction as text: strings as they are, numbers written out, the
    first message of a chat completion (``[[{"content": x}]]``) or of a list."""
    while isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        value = value["content"]
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str | int | float):
        return str(value)
    return None


def as_label(value: object, wrong: float = 0) -> bool | None:
    """A verdict: a bool, or a reward of 1 (right) or `wrong`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (wrong, 1):
        return value == 1
    return None


def verdict_of(node: ast.AST) -> bool | None:
    """A verdict written as a literal: True/False, 1/0, ``[1.0]``, "correct", "C"."""
    try:
        value = literal(node)
    except ValueError:
        return None
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, str):
        return VERDICT_WORDS.get(value)
    return as_label(value)
