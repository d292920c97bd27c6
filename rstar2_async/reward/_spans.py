"""Values in text: math spans, numbers, statements and the words around them.

What the lenient reading takes a value from, in free text (``_free_text``) and in a
box (``_lenient``): the math spans math-verify looks for (``$...$``, ``$$...$$``,
``\\(...\\)``, ``\\[...\\]``), numbers as prose writes them (``1,000``, ``1 000``,
``2,74``, ``45%``, ``2\\pi``, ``30^\\circ``, a tuple ``(1, -2)``), the value a statement
states (``3 + 4 = 7`` is 7, ``5x - 7y + 4 = 0`` stays whole), and whether text is
prose.  A span or number right after "not" (or ``\\neq``) is never a value.  Pure
functions; the callers bound the text they pass.
"""

from __future__ import annotations

import re

from ._compare import equation_sides, false_equation
from ._normalise import TEXT_CMD, unwrap_box
from ._notation import PYTHON_FUNCTIONS, PYTHON_MODULES

__all__ = [
    "ALTERNATIVE",
    "JOIN",
    "LEADING_VAR",
    "MAX_JOINED",
    "SPANS",
    "TEXT",
    "VALUE",
    "first_value",
    "has_prose",
    "joined",
    "last_value",
    "span_answer",
    "span_bounds",
    "stated_gold",
    "statement_value",
    "whole_span",
    "words",
]

# The math spans math-verify looks for; inline ones stay on one line.  An escaped
# dollar (`\$36`) is text inside them.  A parenthesis in prose that opens with a
# LaTeX command (`(\frac{2}{5})`) is a `\(...\)` whose backslashes a renderer ate,
# unless an operator or a command goes on after it: a group (`(\sqrt{33} - 3)/(3)`,
# `(\frac{2}{3}, 1) \cup (7, \infty)`).
SPANS = re.compile(
    r"\$\$(?P<d>(?:\\\$|[^$])+?)\$\$"
    r"|\\\[(?P<b>.+?)\\\]"
    r"|\\\((?P<p>[^\n]+?)\\\)"
    r"|(?<![\\\d$])\$(?P<i>(?:\\\$|[^\n$])+?)(?<!\\)\$"
    r"|(?<![\\\w])\((?P<r>\s*\\(?!left|right|text)[a-zA-Z]+[^()\n]*)\)(?!\s*(?:[-+*/^_=<>]|\\(?!text)[a-zA-Z]))",
    re.DOTALL,
)
# A number: thousands groups (`1,000`, `1 000`), a decimal comma that cannot be one
# (`2,74`), a point; with a percent sign, a scale (`5 million`), or a factor written
# onto it (`2\pi`, `3\sqrt{2}`, `30^\circ`), or before a metric unit written onto it
# (`1,000.99m²`, `12kg`: the number without it).  Never the head of a longer number
# or power (`1,000` of `1,000.99x`, `3` of `3²`).
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.^{\\])[-+]?(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d{1,3}(?: \d{3})+(?![\d,-])"
    r"|\d+,\d{1,2}(?![\d,])|\d*\.\d+|\d+)"
    r"(?:\.\d+)?(?:/\d+)?(?:(?:\s*(?:%|\\%)|\\pi(?![a-zA-Z])|\\sqrt\{\d{1,6}\}|\\sqrt\d|\^\\circ|\^\{\\circ\}|°"
    r"|\s+(?i:hundred|thousand|[mbr]illion|dozen)s?(?![a-zA-Z]))?"
    r"(?![A-Za-z0-9_^²³]|\.\d)|(?=(?:[kcm]?m|[km]?g|m?[lL])[²³]?(?![A-Za-z0-9_^²³])))"
)
# A tuple or interval of plain numbers written in prose: "the center is at (1, -2)".
_TUPLE = re.compile(r"(?<![\w\\])[(\[]\s*[-+]?\d+(?:\.\d+)?(?:\s*,\s*[-+]?\d+(?:\.\d+)?){1,7}\s*[)\]]")
# A time of day in prose, "at 2:00 pm", read whole: not its minutes.
_CLOCK = r"(?<![\w:.,])\d{1,2}:\d{2}(?::\d{2})?(?:\s?[aApP]\.?\s?[mM](?![a-zA-Z])\.?)?(?![\d:])"
VALUE = re.compile(f"{_CLOCK}|{_TUPLE.pattern}|{_NUMBER.pattern}")
"""A time of day, a number, or a tuple of numbers."""
_NEGATED = re.compile(
    r"(?:\b(?:not|nicht|не|não|non|pas)(?:\s+(?:é|è|es|est|ist|sono|são))?|n't|\\neq?|≠|不是|并非|而非)\s*\$?\s*$",
    re.IGNORECASE,
)
_NEGATED_AFTER = re.compile(r"\s*\$?\s*(?:ではな|じゃな|ではありません|[이가]\s*아니)")
_ONE_WORD = re.compile(r"[a-zA-Z]+")
TEXT = re.compile(TEXT_CMD + r"\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_ENVIRONMENT = re.compile(r"\\(?:begin|end)\s*\{[a-zA-Z*]*\}")
# A left side that computes a value: it starts with an operator that binds its own
# variable, or is a name whose subscript sets one (`S_{n=5}`), or has no letter but e and i.
_BOUND = re.compile(
    r"\s*(?:\\(?:lim|sum|prod|int|iint|oint|det)(?![a-zA-Z])|\\begin\{vmatrix\}"
    r"|[a-zA-Z]_\{\s*[a-zA-Z]\s*=[^{}=]*\}\s*$)"
)
_FREE_LETTER = re.compile(r"[a-df-hj-zA-Z]")
# Python's math names, which are no prose: `sqrt(2)`, `2*pi`.
_PYTHON_MATH = re.compile(
    rf"\b(?:{PYTHON_MODULES})\.(?=[a-zA-Z])|(?<![a-zA-Z_])(?:{PYTHON_FUNCTIONS})(?=\s*\()|(?<=[\d*/(.])\s*pi\b|\bpi(?=\s*[*/)])"
)
# Words in any script (two letters or more), and CJK characters, outside LaTeX commands.
_WORD = re.compile(
    r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]"
    # Indic, Thai, Lao, Myanmar and Khmer words, whose vowel signs `\w` does not match
    r"|[\u0900-\u0dff\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]{2,}"
    # not variables after a coefficient (`2xy`), nor points' names (`AB`, `ABC`), nor
    # powers and fractions in Unicode, which `\w` matches (`x³`, `2½`)
    r"|(?<![\\a-zA-Z\d])(?![A-Z]{2,3}(?![^\W\d_]))"
    r"[^\W\d_\u00b2\u00b3\u00b9\u00bc-\u00be\u2070-\u209f\u2150-\u215f]{2,}"
)
# Between two math spans read as one answer (math-verify's joining).
JOIN = re.compile(r"\s*(?:,\s*and|,\s*or|and|or|,)\s*")
MAX_JOINED = 5
"""Most spans read as one answer (math-verify's limit too)."""
ALTERNATIVE = re.compile(
    r"\b(?:or|and)\b|(?<!\\);|\\(?:lor|vee|land|wedge|mid|quad|qquad)(?![a-zA-Z])|\\\\(?![a-zA-Z])|\\&"
)
"""A word or sign that separates two alternatives (``or``, ``\\lor``, ``\\quad``, ``\\&``,
a line break ``\\\\``), not the spacing ``\\;`` or the ``\\\\le`` of LaTeX escaped twice."""
_ENVIRONMENT_BODY = re.compile(r"\\begin\{([a-zA-Z]+\*?)\}.*?\\end\{\1\}", re.DOTALL)
LEADING_VAR = re.compile(r"^\s*[a-zA-Z](?:_\{?\w+\}?)?\s*=(?!=)\s*")
"""A leading ``x =`` (``x_1 =``) before a value."""


def has_prose(text: str) -> bool:
    """Whether `text` holds prose: a word of three letters or more in any script, or
    a CJK character, LaTeX commands and ``\\text{}`` aside (``\\boxed{The answer is
    8}``, ``\\boxed{比例为13/28}``, not ``\\boxed{\\text{odd}}``)."""
    return any(len(w) >= 3 or w >= "\u3040" for w in words(TEXT.sub(" ", text)))


def words(text: str) -> list[str]:
    """The words of prose in `text`, LaTeX commands, environment names and Python's
    math names (``sqrt(2)``, ``2*pi``) aside."""
    return _WORD.findall(_PYTHON_MATH.sub(" ", _COMMAND.sub(" ", _ENVIRONMENT.sub(" ", text))))


def span_bounds(text: str) -> list[tuple[int, int]]:
    """(start, end) of each math span in `text`."""
    return [m.span() for m in SPANS.finditer(text)]


def last_value(text: str) -> str | None:
    """The rightmost math span or number, whichever ends last."""
    span = _last_span(text)
    number = _last_number(text)
    if span is None and number is None:
        return None
    if span is None or (number is not None and number[1] > span[1]):
        return number[0] if number else None
    return span[0]


def first_value(text: str) -> str | None:
    """The leftmost math span or number, whichever starts first (math-verify's lazy
    match after "answer:"); as `last_value`, never one right after a negation."""
    span = _first_span(text)
    number = next((m for m in VALUE.finditer(text) if not _negated(text, m)), None)
    if span is None or (number is not None and number.start() < span[1]):
        return number[0] if number else None
    return span[0]


def joined(group: list[re.Match[str]]) -> str | None:
    """One answer from spans joined by "and"/"or"/commas (math-verify reads them as
    one set): ``$x = -2$ and $x = 1$`` is ``-2, 1``."""
    answers = [span_answer(m) for m in group]
    if len(answers) == 1 or None in answers:
        return answers[0]
    return ", ".join(LEADING_VAR.sub("", a) for a in answers if a)


def span_answer(m: re.Match[str]) -> str | None:
    """The contents of a math span; None for prose between two dollar signs (one
    word, ``$odd$``, is an answer)."""
    content = next(g for g in m.groups() if g is not None).strip()
    if m["r"] is not None and "," in content:
        content = f"({content})"  # `(\\frac{1}{6}, \\frac{1}{6})` in prose: a pair, as it reads
    if (m["i"] is not None or m["r"] is not None) and has_prose(content) and not _ONE_WORD.fullmatch(content):
        return None
    return statement_value(content) or None


def statement_value(content: str) -> str:
    """A chain ``a = b = c`` reads ``c`` (math-verify's last equation), and so does a
    statement of a value, whose left side computes (``3 + 4 = 7``, ``e^{i\\pi} = -1``,
    ``\\lim_{x \\to 0} ... = 1``, a determinant); an equation in an unknown such as
    ``5x - 7y + 4 = 0`` stays whole (``x = 5`` loses its ``x =`` in the comparer), and
    so do alternatives (``p = -1 \\text{ or } p = 2``, ``x = 1; y = 2``).  Bold type or a box
    around it all (``\\mathbf{3 + 4 = 7}``) is no part of it."""
    content = unwrap_box(content)
    sides = equation_sides(content)
    alternatives = "," in content or ALTERNATIVE.search(_ENVIRONMENT_BODY.sub(" ", content))
    if not alternatives and (len(sides) > 2 or (len(sides) == 2 and _computes(sides[0]))):
        return content if false_equation(content) else sides[-1].strip()
    return content


def stated_gold(gold: str) -> str:
    """A gold that states a value with no unknown on either side (``0.56 = 56\\%``) reads
    as that value, as an answer does; an equation in an unknown (``7 = 11a + c``, ``2 = x``)
    and prose stay whole."""
    if has_prose(gold):
        return gold
    sides = equation_sides(gold)
    return statement_value(gold) if len(sides) > 1 and all(_computes(side) for side in sides) else gold


def whole_span(text: str) -> str | None:
    """The math inside `text` when `text` is one math span and nothing else (``$...$``,
    ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``): a gold written as math."""
    text = text.strip()
    m = SPANS.match(text)
    return m[m.lastgroup] if m and m.end() == len(text) and m.lastgroup != "r" else None


def _computes(left: str) -> bool:
    if _BOUND.match(left):
        return True
    return not _FREE_LETTER.search(_COMMAND.sub("", _ENVIRONMENT.sub("", left)))


def _taken(text: str, m: re.Match[str]) -> bool:
    """Whether a math span can be the answer: it holds math, and no negation stands
    right before it."""
    return not _negated(text, m) and span_answer(m) is not None


def _first_span(text: str) -> tuple[str, int] | None:
    """(answer, start) of the leftmost math span `_taken`, with the spans joined to it
    by "and", "or" or commas."""
    spans = list(SPANS.finditer(text))
    for i, m in enumerate(spans):
        if not _taken(text, m):
            continue
        last = i
        while (
            last + 1 < len(spans)
            and last - i + 1 < MAX_JOINED
            and JOIN.fullmatch(text, spans[last].end(), spans[last + 1].start())
        ):
            last += 1
        return joined(spans[i : last + 1]), m.start()
    return None


def _last_span(text: str) -> tuple[str, int] | None:
    """(answer, end) of the rightmost math span `_taken`, with the spans joined to it
    by "and", "or" or commas."""
    spans = list(SPANS.finditer(text))
    for i in reversed(range(len(spans))):
        m = spans[i]
        if not _taken(text, m):
            continue
        first = i
        while (
            first > 0
            and i - first + 1 < MAX_JOINED
            and JOIN.fullmatch(text, spans[first - 1].end(), spans[first].start())
        ):
            first -= 1
        return joined(spans[first : i + 1]), m.end()
    return None


def _last_number(text: str) -> tuple[str, int] | None:
    """(number, end) of the rightmost number (or tuple of numbers) not right after a
    negation."""
    for m in reversed(list(VALUE.finditer(text))):
        if not _negated(text, m):
            return m[0], m.end()
    return None


def _negated(text: str, m: re.Match[str]) -> bool:
    """Whether "not" (or ``\\neq``, or "not" in German, Russian, Portuguese, Italian,
    French or Chinese) stands right before the value `m`, or Japanese or Korean "is
    not" right after it ("$5$ではない", "5가 아닙니다")."""
    return bool(_NEGATED.search(text[max(0, m.start() - 12) : m.start()]) or _NEGATED_AFTER.match(text, m.end()))
