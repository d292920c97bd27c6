"""Our own answer normaliser and comparer: the second, independent check of the reward.

rStar2 accepts an answer when either math-verify or a rule-based comparer says it is
right.  This module is the rule-based half.  It is built for the answers math-verify
tends to miss or that need no symbolic algebra at all:

- plain numbers, decimals (``.5``), fractions (``\\frac``, ``\\dfrac``, ``\\tfrac``,
  ``\\frac12``, ``a/b``) and mixed numbers (``1\\frac{4}{5}``, the MATH convention),
  all compared exactly as rationals;
- thousands separators (``1,000``, ``1{,}000``, ``10,\\!080``), only where the whole
  answer is one number written with 3-digit groups and no space after the commas, so
  tuples and lists such as ``(1,2)`` or ``1, 234`` are never read as one number;
- ``\\text{}``/``\\mbox{}``/``\\mathrm{}`` wrappers, trailing units after a number
  (``5.4 \\text{ cents}``, ``864 \\mbox{ inches}^2``, ``12 cm``), dollar signs,
  degrees (``^\\circ``, ``°``, ``\\degree``) and percentages;
- tuples and intervals (ordered, brackets must agree: ``(3,4]`` is not ``(3,4)``),
  sets ``\\{...\\}`` and bare comma lists (unordered), unions ``\\cup`` (unordered);
- layout noise: ``\\left``/``\\right``, spacing commands (``\\!``, ``\\,``, ``\\;``),
  spaces, ``$``, ``\\displaystyle``, a leading ``x =`` or ``x \\in``, a final period.

Guarantees: pure functions, no I/O, no sympy, nothing evaluated (``9^{9^9}`` stays a
string), so every call is fast and bounded; inputs longer than `MAX_ANSWER_CHARS`
never match.  The comparer errs towards "no": anything it cannot read as the same
value is left to math-verify.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["MAX_ANSWER_CHARS", "answers_match", "normalize_answer"]

MAX_ANSWER_CHARS = 2048
"""Longest answer (in characters) either check looks at.  Real final answers are a
few dozen characters; a longer "answer" is a runaway generation, and refusing it
bounds the cost of grading (and keeps a request to a grading worker far below a
pipe buffer, so writing it never blocks)."""

_MAX_DIGITS = 200
"""Digit strings longer than this are compared as text, never converted to numbers
(Python refuses int() on more than 4300 digits, and nothing real is that long)."""

_MAX_ITEMS = 64
"""Most elements compared in one tuple/list/set (the unordered match is quadratic)."""

# --- normalisation ----------------------------------------------------------------

_TEXT_CMD = r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|mathbf|operatorname)"

_TEXT_OPEN = re.compile(_TEXT_CMD + r"\s*\{")
_UNICODE = str.maketrans({"−": "-", "–": "-", "∞": "\\infty ", "π": "\\pi ", "×": "\\times "})

# Removed outright: sizing and spacing commands that never change a value.
_NOISE = re.compile(
    r"\\\\|\\left\.|\\right\.|\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\\[bB]igg?[lr]?(?![a-zA-Z])"
    r"|\\displaystyle|\\[!,;:> ]|\\q?quad(?![a-zA-Z])|~|\$"
)
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°")
_PERCENT = re.compile(r"\\%|%")
_DOLLAR = re.compile(r"\\\$")
# `10,\!080` and `1{,}000` are explicit thousands separators wherever they appear.
_EXPLICIT_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|,\\!\s*)(?=\d{3}(?!\d))")
_THOUSANDS_NUMBER = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_FRAC_ALIASES = re.compile(r"\\[dtc]frac(?![a-zA-Z])")
# A number followed by a unit: the head must hold a digit and no letters but those of
# a few numeric commands, so `\text{A} \text{ and } \text{B}` or `2x \text{ cm}`
# keep their words.
_UNIT_TAIL_TEXT = re.compile(
    r"^(?P<head>(?:[^a-zA-Z\\]|\\(?:frac|sqrt|pi|cdot|times)(?![a-zA-Z]))*?)"
    rf"\s*{_TEXT_CMD}\{{\s*[a-zA-Z][a-zA-Z.\s]*\}}"
    r"(?:\s*\^\s*\{?\d\}?)?\s*$"
)
_UNIT_TAIL_WORDS = re.compile(
    r"^(?P<head>[-+]?[\d.,/]*\d)\s*(?!pi\b)[a-zA-Z]{2,}(?:\s+[a-zA-Z]+)*(?:\s*\^\s*\{?\d\}?)?\s*\.?$"
)
_LEADING_VARIABLE = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?\s*(?:=|\\in(?![a-zA-Z]))")
_SINGLE_CHAR_GROUP = re.compile(r"([\^_])\{(\w)\}")
_FRAC_ARG = r"(\w|\\[a-zA-Z]+|\{[^{}]*\})"
_FRAC_SHORT = re.compile(rf"\\frac{_FRAC_ARG}{_FRAC_ARG}")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")
_INFINITY = re.compile(r"\+?\\inf(?:ty)?(?![a-zA-Z])")
_CHOICE = re.compile(r"^\(([A-Za-z])\)$")


def normalize_answer(text: str) -> str:
    """Return the canonical string form of one final answer (the inside of a box).

    Two answers with the same canonical form are the same answer.  The form has no
    whitespace, no layout commands and no units; it is meant for comparison, not
    for display.  Pure and fast: no evaluation of any kind.
    """
    s = text.translate(_UNICODE).strip()
    s = _unwrap_boxed(s)
    # Explicit separators first: `\!` in `10,\!080` is noise removed just below.
    s = _EXPLICIT_THOUSANDS.sub("", s)
    # A LaTeX line break `\\` (matrix rows) is kept whole; other noise becomes a space.
    s = _DOLLAR.sub("", s)  # before the noise pass, which drops a bare `$`
    s = _NOISE.sub(lambda m: m[0] if m[0] == "\\\\" else " ", s)
    s = _DEGREES.sub("", s)
    s = _PERCENT.sub("", s)
    s = _FRAC_ALIASES.sub(r"\\frac", s).strip()
    # Units go before `\text{}` is unwrapped, while they can still be told apart
    # from a text answer such as `\text{Evelyn}`.
    while (m := _UNIT_TAIL_TEXT.match(s)) and any(c.isdigit() for c in m["head"]):
        s = m["head"].strip()
    if m := _UNIT_TAIL_WORDS.match(s):
        s = m["head"]
    s = _unwrap_text(s).strip().rstrip(".").strip()
    # Commas as thousands separators only in a lone number with no space after them.
    if _THOUSANDS_NUMBER.fullmatch(s):
        s = s.replace(",", "")
    if s.count("=") == 1 or "\\in" in s:
        s = _LEADING_VARIABLE.sub("", s, count=1)
    s = "".join(s.split())
    s = _SINGLE_CHAR_GROUP.sub(r"\1\2", s)
    s = _FRAC_SHORT.sub(lambda m: rf"\frac{_braced(m[1])}{_braced(m[2])}", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = _INFINITY.sub(r"\\infty", s)
    s = _strip_outer_braces(s)
    if m := _CHOICE.match(s):
        s = m[1]
    return s


def _braced(arg: str) -> str:
    return arg if arg.startswith("{") else "{" + arg + "}"


def _matching_brace(s: str, open_at: int) -> int:
    """Index of the `}` closing the `{` at `open_at`, or -1.  `\\{`/`\\}` are literals."""
    depth = 0
    i = open_at
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _unwrap_boxed(s: str) -> str:
    """`\\boxed{\\boxed{5}}` -> `5`; anything that is not one whole box is unchanged."""
    while m := re.match(r"\\(?:boxed|fbox)\s*\{", s):
        end = _matching_brace(s, m.end() - 1)
        if end != len(s) - 1:
            break
        s = s[m.end() : end].strip()
    return s


def _unwrap_text(s: str) -> str:
    """Replace every `\\text{X}` (and its cousins) by `X`, outermost first."""
    while m := _TEXT_OPEN.search(s):
        end = _matching_brace(s, m.end() - 1)
        if end < 0:
            break
        s = s[: m.start()] + s[m.end() : end] + s[end + 1 :]
    return s


def _strip_outer_braces(s: str) -> str:
    while s.startswith("{") and _matching_brace(s, 0) == len(s) - 1:
        s = s[1:-1]
    return s


# --- comparison -------------------------------------------------------------------

_INT = r"[-+]?\d+"
_DEC = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)"
_DECIMAL = re.compile(_DEC)
_SLASH = re.compile(rf"({_INT})/({_INT})")
_FRAC = re.compile(rf"([-+]?)\\frac\{{({_DEC})\}}\{{({_DEC})\}}")
_MIXED = re.compile(r"([-+]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}")


def _to_number(s: str) -> Fraction | None:
    """Read a canonical form as an exact rational, or None if it is not a plain number."""
    if len(s) > _MAX_DIGITS:
        return None
    try:
        if _DECIMAL.fullmatch(s):
            return Fraction(s)
        if m := _SLASH.fullmatch(s):
            return Fraction(int(m[1]), int(m[2]))
        if m := _FRAC.fullmatch(s):
            value = Fraction(m[2]) / Fraction(m[3])
            return -value if m[1] == "-" else value
        if m := _MIXED.fullmatch(s):
            numerator, denominator = int(m[3]), int(m[4])
            if numerator >= denominator:  # not a mixed number: `2\frac{5}{4}` is a product
                return None
            value = int(m[2]) + Fraction(numerator, denominator)
            return -value if m[1] == "-" else value
    except ZeroDivisionError:
        return None
    return None


def _split_top_level(s: str, sep: str) -> list[str]:
    """Split at `sep` where it is outside every (), [], {} and `\\{ \\}`."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(s):
        if s.startswith("\\{", i):
            depth += 1
            i += 2
            continue
        if s.startswith("\\}", i):
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
    """Split a tuple, interval, set, union or list into (kind, items, ordered)."""
    if len(union := _split_top_level(s, "\\cup")) > 1:
        return "cup", union, False
    if s.startswith("\\{") and s.endswith("\\}"):
        return "set", _split_top_level(s[2:-2], ","), False
    if s[:1] in "([" and s[-1:] in ")]" and len(_split_top_level(s[1:-1], ",")) > 1:
        # Only if the outer pair encloses everything: `(1,2)+(3,4)` is no tuple.
        if len(_split_top_level(s, ",")) == 1 and _encloses(s):
            return s[0] + s[-1], _split_top_level(s[1:-1], ","), True
    if len(items := _split_top_level(s, ",")) > 1:
        return "list", items, False
    return None


def _encloses(s: str) -> bool:
    depth = 0
    for i, c in enumerate(s):
        depth += c in "([{"
        depth -= c in ")]}"
        if depth == 0 and i < len(s) - 1:
            return False
    return True


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    x, y = _to_number(a), _to_number(b)
    if x is not None or y is not None:
        return x is not None and y is not None and x == y
    ca, cb = _compound(a), _compound(b)
    if ca is None or cb is None:
        return False
    (kind_a, items_a, ordered), (kind_b, items_b, _) = ca, cb
    if kind_a != kind_b or len(items_a) != len(items_b) or len(items_a) > _MAX_ITEMS:
        return False
    if ordered:
        return all(_same(p, q) for p, q in zip(items_a, items_b))
    remaining = list(items_b)
    for p in items_a:
        for j, q in enumerate(remaining):
            if _same(p, q):
                del remaining[j]
                break
        else:
            return False
    return True


def answers_match(pred: str, gold: str) -> bool:
    """True when `pred` is recognisably the same answer as `gold`.

    Both are final answers (the inside of ``\\boxed{}``), not whole responses.
    Numbers are compared exactly (``0.5`` equals ``\\frac{1}{2}``; ``0.333`` does not
    equal ``\\frac13``); tuples and intervals element by element in order, sets and
    comma lists in any order.  Never raises; False when in doubt or when either side
    is empty or longer than `MAX_ANSWER_CHARS`.
    """
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    p, g = normalize_answer(pred), normalize_answer(gold)
    return bool(p) and bool(g) and _same(p, g)
