"""Our rule-based comparer: are two canonical forms (``_normalise``) the same answer?

Numbers are exact rationals.  In lenient mode a decimal within `LENIENT_REL_TOL` of a
gold that is no integer also equals it (`rel_tolerance` tells the worker when
math-verify's verdict may be widened so), a number spelt out or in e-notation is read
(`_numbers.numeral`), and a tuple equals a one-column or one-row matrix of its entries
(`_vectors`).  Tuples and intervals are ordered, sets and comma lists unordered (a set
equals a list of the same items); unions are unordered; matrices compare cell by cell;
an inequality in one variable equals the interval it describes (`_intervals`), but two
inequalities compare only as written.  A decimal comma is read as a point where the
other side is a decimal written with one (``1,22`` and ``1.22``).  Pure, bounded
(`_MAX_ITEMS`, `_numbers.MAX_DIGITS`), and biased towards "no": what it cannot read is
left to math-verify.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Literal

from ._intervals import as_interval
from ._normalise import MAX_ANSWER_CHARS, normalize_answer
from ._numbers import INTEGER, numeral, to_number

__all__ = [
    "LENIENT_REL_TOL",
    "GradingMode",
    "answer_parts",
    "answers_match",
    "equation_sides",
    "false_equation",
    "rel_tolerance",
    "set_for_ordered",
]

GradingMode = Literal["strict", "lenient"]
"""``"strict"``: rStar2's format (training).  ``"lenient"``: a box if there is one,
else the answer in free text (evaluation of outside models); see ``_lenient``."""

LENIENT_REL_TOL = Fraction(1, 10_000)
"""In lenient mode, two numbers this close (relative) are equal when one of them is
written as a decimal and the gold is not an integer (``3.14159`` for ``3.1416``,
``2.6667`` for ``\\frac{8}{3}``, ``1.4142`` for ``\\sqrt{2}``): the ``rel_tol=1e-4`` of
``math_equal``, the grader of Qwen2.5-Math's evaluation that SkyThought and MindSpeed-RL
test, so scores compare with the numbers the field reports.  An integer gold still
needs that integer, a fraction is never an approximation (``\\frac{3333}{10000}`` is
not ``\\frac13``), and strict mode (training's reward) compares exactly."""

_MAX_ITEMS = 64
"""Most elements compared in one tuple/list/set (the unordered match is quadratic)."""

_MATRIX = re.compile(r"\\begin\{pmatrix\}(.*)\\end\{pmatrix\}")
_COMMA_DECIMAL = re.compile(r"([-+]?\d+),(\d+)")
_POINT_DECIMAL = re.compile(r"[-+]?\d+\.\d+")
_VARIABLE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z](?![a-zA-Z])")
_ROUNDED = re.compile(r"[-+]?\d+\.\d+(?:[eE][-+]?\d{1,3})?")
"""A number written rounded: a decimal, in e-notation too (``1.09951162778E+12``)."""


def _split_top_level(s: str, sep: str) -> list[str]:
    """Split at `sep` where it is outside every (), [], {}, `\\{ \\}` and environment."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(s):
        if s.startswith(("\\{", "\\begin{"), i):
            depth += 1
            i += 2
            continue
        if s.startswith(("\\}", "\\end{"), i):
            depth -= 1
            i += 2
            continue
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    parts.append(s[start:])
    return parts


def _compound(s: str) -> tuple[str, list[str], bool] | None:
    """Split a matrix, tuple, interval, set, union or list into (kind, items, ordered)."""
    if m := _MATRIX.fullmatch(s):
        rows = _split_top_level(m[1], "\\\\")
        if rows and rows[-1] == "":  # a trailing `\\` before `\end`
            rows.pop()
        cells = [_split_top_level(r, "&") for r in rows]
        if cells and all(len(r) == len(cells[0]) for r in cells):
            return f"matrix{len(cells)}x{len(cells[0])}", [c for r in cells for c in r], True
        return None
    if len(union := _split_top_level(s, "\\cup")) > 1:
        return "cup", union, False
    if s.startswith("\\{") and s.endswith("\\}"):
        return "list", _plus_minus(_split_top_level(s[2:-2], ",")), False  # a set is compared as a list
    # A tuple or interval only if the outer pair encloses everything: `(1,2)+(3,4)` is none.
    if s[:1] in "([" and s[-1:] in ")]" and len(_split_top_level(s[1:-1], ",")) > 1 and _encloses(s):
        return s[0] + s[-1], _split_top_level(s[1:-1], ","), True
    if len(items := _split_top_level(s, ",")) > 1 or len(_split_top_level(s, "\\pm")) == 2:
        return "list", _plus_minus(items), False
    return None


def _plus_minus(items: list[str]) -> list[str]:
    """List items with one top-level ``\\pm`` spelt out: ``1\\pm\\sqrt{5}`` is two."""
    out = []
    for item in items:
        if len(parts := _split_top_level(item, "\\pm")) == 2:
            out += [parts[0] + "+" + parts[1], parts[0] + "-" + parts[1]]
        else:
            out.append(item)
    return out


def _encloses(s: str) -> bool:
    depth = 0
    for i, c in enumerate(s):
        depth += c in "([{"
        depth -= c in ")]}"
        if depth == 0 and i < len(s) - 1:
            return False
    return True


# --- comparison --------------------------------------------------------------------


def _rounded(answer: str, gold: str) -> bool:
    """Whether lenient mode's tolerance applies to two canonical numbers (a decimal; the gold no integer)."""
    return ("." in answer or "." in gold) and not INTEGER.fullmatch(gold)


def _close(x: Fraction, y: Fraction, answer: str, gold: str) -> bool:
    return _rounded(answer, gold) and abs(x - y) <= LENIENT_REL_TOL * max(abs(x), abs(y))


def _same(a: str, b: str, tolerant: bool) -> bool:
    """`a` (the answer) is `b` (the gold); `tolerant`: lenient mode's numbers."""
    if a == b:
        return True
    if (times := same_time(a, b)) is not None:
        return times
    x, y = to_number(a), to_number(b)
    if x is not None or y is not None:
        return x is not None and y is not None and (x == y or (tolerant and _close(x, y, a, b)))
    ca, cb = _compound(a), _compound(b)
    if ca is None or cb is None:
        return False
    (kind_a, items_a, ordered), (kind_b, items_b, _) = ca, cb
    if len(items_a) != len(items_b) or len(items_a) > _MAX_ITEMS:
        return False
    if kind_a != kind_b and not (tolerant and _vectors(kind_a, kind_b, len(items_a))):
        return False
    if ordered:
        return all(_same(p, q, tolerant) for p, q in zip(items_a, items_b))
    remaining = list(items_b)
    for p in items_a:
        for j, q in enumerate(remaining):
            if _same(p, q, tolerant):
                del remaining[j]
                break
        else:
            return False
    return True


def _vectors(kind_a: str, kind_b: str, n: int) -> bool:
    """A tuple (or a list in brackets) and a one-column (or one-row) matrix of the same
    `n` entries: one vector written two ways (``(1, 2, 3)`` or ``[1, 2, 3]`` for
    ``\\begin{pmatrix} 1 \\\\ 2 \\\\ 3 \\end{pmatrix}``), which lenient mode reads as equal."""
    vector = {"()", "[]", f"matrix{n}x1", f"matrix1x{n}"}
    return kind_a in vector and kind_b in vector and any(k.startswith("matrix") for k in (kind_a, kind_b))


def answers_match(pred: str, gold: str, *, mode: GradingMode = "strict") -> bool:
    """True when `pred` is recognisably the same answer as `gold`.

    Both are final answers (the inside of ``\\boxed{}``), not whole responses.
    Numbers are compared exactly (``0.5`` equals ``\\frac{1}{2}``; ``0.333`` does not
    equal ``\\frac13``), except that in ``mode="lenient"`` two numbers within
    `LENIENT_REL_TOL` are equal when one is written as a decimal and the gold is no
    integer literal (``0.3333`` for ``\\frac13``, not ``0.333``); tuples and intervals
    element by element in order, sets and comma lists in any order, matrices cell by
    cell; an inequality against an interval as the interval it describes.  Never
    raises; False when in doubt or when either side is empty or longer than
    `MAX_ANSWER_CHARS`.
    """
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    p, g = normalize_answer(pred), normalize_answer(gold)
    if not (p and g):
        return False
    tolerant = mode == "lenient"
    if tolerant:
        p, g = numeral(p), numeral(g)
    if _same(p, g, tolerant) or _decimal_comma(p, g) or _decimal_comma(g, p):
        return True
    if tolerant and (_on_the_hour(p, g) or _on_the_hour(g, p)):  # GSM8K's `2` for `2:00 pm`
        return True
    # An inequality is read as the interval it describes; two inequalities must also
    # name the same variable (`y > 2` is not `x > 2`).
    ip, ig = as_interval(p), as_interval(g)
    if ip and ig:
        return ip[0] == ig[0] and _same(ip[1], ig[1], tolerant)
    if ip or ig:
        return _same(ip[1] if ip else p, ig[1] if ig else g, tolerant)
    return False


_TIME = re.compile(r"(\d{1,2}):(\d{2})(h?)")


def _hours(hour: int, known: bool) -> set[int]:
    """The hours of the 24-hour clock an hour may be: itself when its half of the day
    is known, else both halves (``2`` is 2:00 or 14:00)."""
    return {hour % 24} if known or not 1 <= hour <= 12 else {hour % 12, hour % 12 + 12}


def same_time(a: str, b: str) -> bool | None:
    """Whether two canonical times of day (``_normalise``'s ``20:34h``, ``1:30``) can
    be the same time; None unless both are times."""
    if not ((ma := _TIME.fullmatch(a)) and (mb := _TIME.fullmatch(b))):
        return None
    return ma[2] == mb[2] and bool(_hours(int(ma[1]), bool(ma[3])) & _hours(int(mb[1]), bool(mb[3])))


def _on_the_hour(time: str, number: str) -> bool:
    """A time on the hour (``2:00 pm``) and the bare hour a data set gives for it
    (GSM8K's gold ``2``; ``14`` is no ``2:00 am``)."""
    if not ((m := _TIME.fullmatch(time)) and m[2] == "00" and INTEGER.fullmatch(number)):
        return False
    return bool(_hours(int(m[1]), bool(m[3])) & _hours(int(number), False))


_EQUALS = re.compile(r"(?<![<>!\\])=")
"""An ``=`` that is not part of ``<=``, ``>=``, ``!=`` or ``\\=``."""
_BRACE_OR_EQUALS = re.compile(rf"\\[{{}}]|[{{}}]|{_EQUALS.pattern}")


def equation_sides(content: str) -> list[str]:
    """The sides of an equation or chain: `content` split at each `_EQUALS` outside
    braces.  The ``=`` of a bound (``\\sum_{k=0}^{n}``) or a subscript
    (``a_{i=1}``) ends no side: split there, ``F_n = \\sum_{k=0} F_k`` was read as
    the value ``0} F_k``."""
    if "{" not in content:
        return _EQUALS.split(content)
    sides, depth, start = [], 0, 0
    for m in _BRACE_OR_EQUALS.finditer(content):
        if m[0] == "{":
            depth += 1
        elif m[0] == "}":
            depth = max(depth - 1, 0)
        elif m[0] == "=" and depth == 0:
            sides.append(content[start : m.start()])
            start = m.end()
    return [*sides, content[start:]]


_BARE_NUMBER = re.compile(r"\s*[-+]?(?:\d+(?:\.\d+)?|\d+\s*/\s*\d+|\\[dt]?frac\s*\{\s*\d+\s*\}\s*\{\s*\d+\s*\})\s*")


_LINKS = re.compile(rf"{_EQUALS.pattern}|\\(?:to|rightarrow|longrightarrow|Rightarrow|implies|iff|mapsto)(?![a-zA-Z])")
"""What joins the links of a chain a value is read from: ``=``, and the arrows
math-verify's boxed reading passes over to their right side (``1 \\implies 2``).  Not
``\\equiv`` (``17 \\equiv 2`` is a remainder), nor ``\\approx`` or ``\\sim``: a
rounding as coarse as the writer likes (``\\frac23 \\approx 0.7``) cannot make them false."""


_SET_OPEN = re.compile(r"\\\{|\\lbrace")


def set_for_ordered(answer: str, gold: str) -> bool:
    """A set (``\\{1, 2\\}``) for a gold tuple or interval (``(1, 2)``, ``[1, 2]``): a set
    has no order and no interval is two points; math-verify compares a set's sorted items
    with a tuple's, so it paid ``\\{1, 2\\}`` (and not ``\\{2, 1\\}``) for ``(1, 2)``."""
    if len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS or not _SET_OPEN.search(answer):
        return False
    a = normalize_answer(answer)
    if not a.startswith("\\{") or (items := _compound(a)) is None:
        return False
    g = _compound(normalize_answer(gold))
    # `\\{(1, 2)\\}`, the set of that one pair, may answer it
    return g is not None and g[0] in ("()", "[]", "(]", "[)") and len(items[1]) == len(g[1])


def false_equation(content: str) -> bool:
    """A chain of plain numbers that are not all equal, even roughly (``3 = 2``,
    ``\\frac13 = \\frac12``, ``1 \\to 2``): it states no value, though
    math-verify would read its right side."""
    sides = _LINKS.split(content)
    if len(sides) < 2 or not all(_BARE_NUMBER.fullmatch(side) for side in sides):
        return False  # a unit or a sign (`1 \\text{ km} = 1000 \\text{ m}`, `25\\% = 0.25`) may make it hold
    values = [to_number(normalize_answer(side)) for side in sides]
    if None in values:
        return False
    last = values[-1]  # `\\frac13 = 0.3333` is a rounding, not a false statement
    return any(abs(v - last) > Fraction(1, 100) * max(abs(v), abs(last)) for v in values)


def rel_tolerance(answer: str, gold: str, mode: GradingMode) -> float:
    """The relative tolerance math-verify's verdict may be widened by: `LENIENT_REL_TOL`
    in lenient mode when one answer is a decimal number and the gold no integer literal
    (``1.4142`` for ``\\sqrt{2}``), when both are tuples, lists or matrices of as many
    entries with a decimal entry, or expressions in variables with a decimal constant
    (``0.333333+(-0.0185185)(x-5)`` for ``\\frac{23-x}{54}``); else 0.0 (exact)."""
    if mode != "lenient" or len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return 0.0
    a, g = normalize_answer(answer), normalize_answer(gold)
    ca, cg = _compound(a), _compound(g)
    widened = (
        ((_ROUNDED.fullmatch(a) or _ROUNDED.fullmatch(g)) and _rounded(a, g))
        # a tuple, list or matrix: the worker compares entry by entry (``(3, 1.5708)``)
        or (ca and cg and len(ca[1]) == len(cg[1]) and any(_ROUNDED.fullmatch(x) for x in ca[1] + cg[1]))
        # as functions, at sample points (variables as written: the canonical ``\\pir``)
        or (_POINT_DECIMAL.search(a + " " + g) and _VARIABLE.search(answer) and _VARIABLE.search(gold))
    )
    return float(LENIENT_REL_TOL) if widened else 0.0


def _decimal_comma(a: str, b: str) -> bool:
    """``1,22`` against ``1.22``: one comma where the other side has a decimal point,
    with the same digits (no thousands separator: ``1,000`` was read as 1000)."""
    return bool(
        (m := _COMMA_DECIMAL.fullmatch(a)) and _POINT_DECIMAL.fullmatch(b) and _same(f"{m[1]}.{m[2]}", b, False)
    )


def answer_parts(answer: str) -> tuple[str, list[str]]:
    """(kind, parts) of an answer: ``"()"`` and its parts in order for a tuple
    (``(2, 3)``), ``"list"`` and its parts for an unordered list or set (``3, 5, 7``,
    ``\\{1, 2\\}``), else ``""`` and the answer itself; parts canonical."""
    s = normalize_answer(answer) if len(answer) <= MAX_ANSWER_CHARS else answer
    if (c := _compound(s)) is not None and c[0] in ("()", "list"):
        return c[0], c[1]
    return "", [s]
