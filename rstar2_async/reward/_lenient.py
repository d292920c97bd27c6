"""Where a response that ignores rStar2's format puts its final answer: the lenient mode.

Training grades rStar2's format strictly (`extract_answer`: the last ``\\boxed{}`` of
the last ``<answer>`` block, or the last box anywhere; no box, no reward).  Outside
models asked through a chat endpoint often write no box at all, so evaluation can
grade leniently (`final_answer` with ``mode="lenient"``):

1. With boxes: the same box strict mode takes; but when the gold answer is a list of
   ``k`` parts and the response ends with ``k`` boxes in a row (``\\boxed{3}`` and
   ``\\boxed{5}``), those boxes, joined as a list.
2. Without a box, the answer is read from free text in math-verify's order of
   preference (``math_verify.parse``'s default extraction): first the rightmost
   anchored answer ("final answer is ...", "the answer is ...", "Answer: ...",
   ``#### ...``), then the rightmost LaTeX span (``$...$``, ``$$...$$``, ``\\(...\\)``,
   ``\\[...\\]``) or bare number, whichever ends last.

It departs from math-verify's extraction where that would accept a wrong answer:
the text after an anchor ends at the sentence ("The answer is 7, not 5" reads 7),
a number right after "not" is never taken, and a ``$...$`` span holding prose ("$5
and gets $") is currency, not math.  Pure functions, linear-time regexes; the
extracted answer then goes to the same two checks as a boxed one.
"""

from __future__ import annotations

import re
from typing import Literal

from ._answer import answer_region, boxed_answers, extract_answer
from ._compare import list_items

__all__ = ["GradingMode", "final_answer"]

GradingMode = Literal["strict", "lenient"]
"""``"strict"``: rStar2's format (training).  ``"lenient"``: a box if there is one,
else the answer in free text (evaluation of outside models)."""

# An anchor, then the answer right after it.  `answer` must be followed by a verb or
# a colon, so "to answer this" anchors nothing.
_ANCHOR = re.compile(
    r"(?:\bfinal\s+answer\b(?:\s*\*\*)?\s*(?:is\b|:|=|\n)"
    r"|\banswer\b(?:\s*\*\*)?\s*(?:is\b|:|=|would\s+be\b|should\s+be\b|will\s+be\b|equals\b)"
    r"|^\s*####)"
    r"[\s:*=]*",
    re.IGNORECASE | re.MULTILINE,
)
# The math spans math-verify looks for; inline ones stay on one line.
_SPANS = re.compile(
    r"\$\$(?P<d>[^$]+?)\$\$"
    r"|\\\[(?P<b>.+?)\\\]"
    r"|\\\((?P<p>[^\n]+?)\\\)"
    r"|(?<![\\\d$])\$(?P<i>(?:\\\$|[^\n$])+?)(?<!\\)\$",
    re.DOTALL,
)
_NUMBER = re.compile(r"(?<![\w.^_{\\])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?(?:\s*(?:%|\\%))?(?![\w^])")
_NOT = re.compile(r"\s*(?:not|n't)\b", re.IGNORECASE)
_NEGATED = re.compile(r"(?:\bnot|n't|\\neq?|≠)\s*\$?\s*$", re.IGNORECASE)
# Prose inside `$...$`: a word of three letters or more that is no LaTeX command.
_PROSE = re.compile(r"(?<![\\a-zA-Z{])[a-zA-Z]{3,}(?![a-zA-Z]*\})")
# Where the answer after an anchor ends: a line break, a full stop (not a decimal
# point), a semicolon, a comma before a word, or a word that starts an explanation.
_ANSWER_END = re.compile(
    r"\n|\.(?!\d)|;|,\s*(?=[a-zA-Z]{2})|\s(?:because|since|which|as|so|for|when|where|but|if|and\s+(?:so|thus|hence))\b",
    re.IGNORECASE,
)
_LAST_EQUALS = re.compile(r"(?<![<>!\\])=")
# Between two boxes of one multi-part answer: punctuation, "and", labels such as
# "(b)" or `\text{and}`, never a digit or another sentence.
_BOX_GAP = re.compile(
    r"(?:[\s$,;.&]|\\[,;! ]|\\quad|\\text\{\s*(?:and|,)?\s*\}|\band\b|\bor\b|\(\s*[a-z]\s*\)|\b[a-z]\s*=|\*\*)*"
)
_MAX_BOX_GAP = 40
"""Longest text (characters) between two boxes read as parts of one answer."""
_TAIL_CHARS = 8000
"""Free text is read in the response's last this many characters: the final answer
is at the end, and it bounds the cost of the span regexes on a runaway response
full of unclosed ``\\[``."""


def final_answer(text: str, gold: str | None = None, *, mode: GradingMode = "strict") -> str | None:
    """The final answer of a response under a grading mode, or None if it has none.

    ``"strict"`` is `extract_answer` (``gold`` is not read).  ``"lenient"`` reads the
    boxes first and free text only when there is no box (see the module docstring);
    ``gold`` tells how many parts a multi-part answer has.

    Raises:
        ValueError: an unknown `mode`.
    """
    if mode == "strict":
        return extract_answer(text)
    if mode != "lenient":
        raise ValueError(f"mode: expected 'strict' or 'lenient', got {mode!r}")
    start, end = answer_region(text)
    boxes = boxed_answers(text[start:end])
    if boxes:
        region = text[start:end]
        return _several_boxes(region, boxes, gold) or boxes[-1][0]
    return free_text_answer(text)


def _several_boxes(text: str, boxes: list[tuple[str, int, int]], gold: str | None) -> str | None:
    """The last ``k`` boxes as one list when the gold answer has ``k`` > 1 parts and
    nothing but separators stands between them; else None."""
    k = len(list_items(gold)) if gold is not None else 0
    if k < 2 or len(boxes) < k:
        return None
    last = boxes[-k:]
    for (_, _, end), (_, start, _) in zip(last, last[1:]):
        gap = text[end:start]
        if len(gap) > _MAX_BOX_GAP or not _BOX_GAP.fullmatch(gap):
            return None
    return ", ".join(content for content, _, _ in last)


def free_text_answer(text: str) -> str | None:
    """The final answer of a response without a box: the rightmost anchored answer,
    else the rightmost math span or number.  None when there is neither."""
    text = text[-_TAIL_CHARS:]
    for anchor in reversed(list(_ANCHOR.finditer(text))):
        if answer := _after_anchor(text, anchor.end()):
            return answer
    span = _last_span(text)
    number = _last_number(text)
    if span is None and number is None:
        return None
    if span is None or (number is not None and number[1] > span[1]):
        return number[0] if number else None
    return span[0]


def _after_anchor(text: str, at: int) -> str | None:
    """The answer that starts at `at`: a math span right there, or the rest of the
    sentence."""
    if (m := _SPANS.match(text, at)) and (answer := _span_answer(m)):
        return answer
    rest = text[at : at + 200]
    if _NOT.match(rest):  # "the answer is not 5"
        return None
    cut = _ANSWER_END.search(rest)
    answer = (rest[: cut.start()] if cut else rest).strip().strip("*").strip()
    return answer or None


def _span_answer(m: re.Match[str]) -> str | None:
    """The contents of a math span, after its last ``=`` (``x = 5`` reads 5, as
    math-verify reads the last equation); None for prose between two dollar signs."""
    content = next(g for g in m.groups() if g is not None).strip()
    if m["i"] is not None and _PROSE.search(re.sub(r"\\text\{[^}]*\}", "", content)):
        return None
    if "," not in content:
        content = _LAST_EQUALS.split(content)[-1].strip()
    return content or None


def _last_span(text: str) -> tuple[str, int] | None:
    """(answer, end) of the rightmost math span that holds math."""
    for m in reversed(list(_SPANS.finditer(text))):
        if not _NEGATED.search(text[max(0, m.start() - 12) : m.start()]) and (answer := _span_answer(m)):
            return answer, m.end()
    return None


def _last_number(text: str) -> tuple[str, int] | None:
    """(number, end) of the rightmost number not right after a negation."""
    for m in reversed(list(_NUMBER.finditer(text))):
        if not _NEGATED.search(text[max(0, m.start() - 12) : m.start()]):
            return m[0], m.end()
    return None
