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
the text after an anchor ends at the sentence ("The answer is 7, not 5" reads 7), an
anchored sentence that is a question ("Is the answer 5?") or starts with "not" is
skipped, a span or number right after "not" is never taken, and a ``$...$`` span
holding prose ("$5 and gets $") is currency, not math.  Pure functions whose cost is
bounded (free text is read in its last `_TAIL_CHARS` characters); the extracted
answer then goes to the same two checks as a boxed one.
"""

from __future__ import annotations

import itertools
import re
from typing import Literal

from ._answer import answer_region, boxed_answers, extract_answer
from ._compare import list_items
from ._normalise import TEXT_CMD

__all__ = ["EQUALS", "GradingMode", "final_answer", "free_text_answer"]

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
    r"\n|\.(?!\d)|;|\?|(?<=\S)\s+\(|,\s*(?=[a-zA-Z]{2})|\s(?:because|since|which|as|so|for|when|where|but|if|and\s+(?:so|thus|hence))\b",
    re.IGNORECASE,
)
EQUALS = re.compile(r"(?<![<>!\\])=")
"""An ``=`` that is not part of ``<=``, ``>=``, ``!=`` or ``\\=``."""
_TEXT = re.compile(TEXT_CMD + r"\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_LETTER = re.compile(r"[a-zA-Z]")
# Between two boxes of one multi-part answer: punctuation, "and", labels such as
# "(b)" or `\text{and}`, never a digit or another sentence.
_BOX_GAP = re.compile(
    r"(?:[\s$,;.&]|\\[,;! ]|\\quad|\\text\{\s*(?:and|,)?\s*\}|\band\b|\bor\b|\(\s*[a-z]\s*\)"
    r"|\b[a-zA-Z](?:_\{?\w+\}?)?\s*=|\*\*)*"
)
# Between two math spans read as one answer (math-verify's joining).
_JOIN = re.compile(r"\s*(?:,\s*and|,\s*or|and|or|,)\s*")
_MAX_JOINED = 5
"""Most spans read as one answer (math-verify's limit too)."""
_LEADING_VAR = re.compile(r"^\s*[a-zA-Z](?:_\{?\w+\}?)?\s*=(?!=)\s*")
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
    """The boxes ending the response as one list, when exactly ``k`` of them stand in
    a row (nothing but separators between them) and the gold answer has ``k`` > 1
    parts; else None.  ``\\boxed{2}, \\boxed{3}, \\boxed{5}`` is no answer ``3, 5``."""
    k = len(list_items(gold)) if gold is not None else 0
    if k < 2:
        return None
    run = 1
    for (_, later, _), (_, _, earlier) in itertools.pairwise(reversed(boxes)):
        gap = text[earlier:later]
        if len(gap) > _MAX_BOX_GAP or not _BOX_GAP.fullmatch(gap):
            break
        run += 1
    if run != k:
        return None
    return ", ".join(content for content, _, _ in boxes[-k:])


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
    """The answer that starts at `at`: math spans right there (several joined by
    "and", "or" or commas), or the rest of the sentence.  None after "not", or when
    the sentence is a question ("Is the answer 5?")."""
    if m := _SPANS.match(text, at):
        group = [m]
        while (
            len(group) < _MAX_JOINED
            and (j := _JOIN.match(text, group[-1].end()))
            and (m := _SPANS.match(text, j.end()))
        ):
            group.append(m)
        if answer := _joined(group):
            return answer
    rest = text[at : at + 200]
    if _NOT.match(rest):  # "the answer is not 5"
        return None
    cut = _ANSWER_END.search(rest)
    if cut and cut[0] == "?":
        return None
    answer = (rest[: cut.start()] if cut else rest).strip().strip("*").strip()
    return answer or None


def _joined(group: list[re.Match[str]]) -> str | None:
    """One answer from spans joined by "and"/"or"/commas (math-verify reads them as
    one set): ``$x = -2$ and $x = 1$`` is ``-2, 1``."""
    answers = [_span_answer(m) for m in group]
    if len(answers) == 1 or None in answers:
        return answers[0]
    return ", ".join(_LEADING_VAR.sub("", a) for a in answers if a)


def _span_answer(m: re.Match[str]) -> str | None:
    """The contents of a math span; None for prose between two dollar signs.

    A chain ``a = b = c`` reads ``c`` (math-verify's last equation), and so does a
    computation ``3 + 4 = 7`` (no letter left of ``=``); an equation such as
    ``5x - 7y + 4 = 0`` stays whole (``x = 5`` loses its ``x =`` in the comparer)."""
    content = next(g for g in m.groups() if g is not None).strip()
    if m["i"] is not None and _PROSE.search(_TEXT.sub("", content)):
        return None
    sides = EQUALS.split(content)
    if "," not in content and (len(sides) > 2 or (len(sides) == 2 and not _LETTER.search(_COMMAND.sub("", sides[0])))):
        content = sides[-1].strip()
    return content or None


def _last_span(text: str) -> tuple[str, int] | None:
    """(answer, end) of the rightmost math span that holds math, with the spans
    joined to it by "and", "or" or commas."""
    spans = list(_SPANS.finditer(text))
    for i in reversed(range(len(spans))):
        m = spans[i]
        if _NEGATED.search(text[max(0, m.start() - 12) : m.start()]) or _span_answer(m) is None:
            continue
        first = i
        while (
            first > 0
            and i - first + 1 < _MAX_JOINED
            and _JOIN.fullmatch(text, spans[first - 1].end(), spans[first].start())
        ):
            first -= 1
        return _joined(spans[first : i + 1]), m.end()
    return None


def _last_number(text: str) -> tuple[str, int] | None:
    """(number, end) of the rightmost number not right after a negation."""
    for m in reversed(list(_NUMBER.finditer(text))):
        if not _NEGATED.search(text[max(0, m.start() - 12) : m.start()]):
            return m[0], m.end()
    return None
