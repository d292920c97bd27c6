"""Our own answer normaliser: the canonical form the rule-based comparer (``_compare``)
reads, the second, independent check of the reward.

rStar2 accepts an answer when either math-verify or a rule-based comparer says it is
right.  These two modules are the rule-based half.  They are built for the answers
math-verify tends to miss or that need no symbolic algebra at all:

- plain numbers, decimals (``.5``), fractions (``\\frac``, ``\\dfrac``, ``\\tfrac``,
  ``\\frac12``, ``a/b``), mixed numbers (``1\\frac{4}{5}``, the MATH convention, and
  ``1 1/2``) and scientific notation (``2.5 \\times 10^{-3}``), all compared exactly as
  rationals (lenient mode also takes a decimal within the
  field's relative 1e-4 of a gold that is no integer, see ``_compare``);
- thousands separators (``1,000``, ``1{,}000``, ``10,\\!080``), only where the whole
  answer is one number written with 3-digit groups and no space after the commas, so
  tuples and lists such as ``(1,2)`` or ``1, 234`` are never read as one number;
- ``\\text{}``/``\\mbox{}``/``\\mathrm{}`` wrappers, trailing units after a number
  (``5.4 \\text{ cents}``, ``864 \\mbox{ inches}^2``, ``12 cm``, ``1:30 PM``),
  currency signs (``\\$``, ``€``, ``£``, ``¥``, ``₹``, ``¢``), degrees (``^\\circ``, ``°``,
  ``\\degree``) and percentages;
- tuples and intervals (ordered, brackets must agree: ``(3,4]`` is not ``(3,4)``;
  ``]a,b[`` is ``(a,b)``; ``\\mathbb{R}`` is ``(-\\infty,\\infty)``), sets ``\\{...\\}``
  (``\\lbrace``) and bare comma lists (unordered, a set equals a list), unions
  ``\\cup`` (unordered), ``\\emptyset``/``\\varnothing``/``\\{\\}``/"no solution"; an
  inequality in one variable against an interval (``x > 2`` is ``(2,\\infty)``,
  ``|x| > 8`` a union, ``|x - 3| < 2`` is ``(1,5)``, ``\\{x \\mid x > 2\\}`` its
  condition's interval; see ``_compare``);
- matrices: ``pmatrix``, ``bmatrix``, ``matrix``, ``array`` (in any brackets) and a
  list of rows ``[[1, 2], [3, 4]]`` are one form, compared cell by cell;
- a time of day is the 24-hour clock's (``8:34 p.m.`` and ``20:34:00`` are ``20:34h``,
  ``2 pm`` is ``14:00h``; ``1:30`` may be either half of the day); an ordinal
  (``12^{\\text{th}}``) is its number; a choice with its value (``\\textbf{(C)}\\ 12``)
  is the choice; "all real numbers" is ``\\mathbb{R}``;
- relations: ``\\neq``/``\\ne``/``≠`` are ``!=``, ``\\leq``/``≤`` ``<=``, ``\\geq``/``≥`` ``>=``;
- layout noise: ``\\left``/``\\right``, spacing commands (``\\!``, ``\\,``, ``\\;``),
  spaces, ``$``, ``\\displaystyle``, a leading ``x =``, ``f(x) =`` or ``x \\in`` (or a
  trailing ``= x`` after a number), a leading ``Answer:`` (``\\text{Final answer: }``,
  ``**Answer:**``), a final period and a final lone backslash (``185\\``); a command
  escaped twice (``\\\\le``: LaTeX that went through JSON or a Python string), inside
  an environment only when every command is.  A function's name before ``=``
  (``\\sin(x) =``) stays: it is no variable.

Guarantees: pure functions, no I/O, no sympy, nothing evaluated (``9^{9^9}`` stays a
string), so every call is fast and bounded; inputs longer than `MAX_ANSWER_CHARS`
never match.  The comparer errs towards "no": anything it cannot read as the same
value is left to math-verify.
"""

from __future__ import annotations

import re
from decimal import Decimal

from ._notation import EMPTY_SQRT, braced_fractions, spelled_math
from ._units import DEGREE_SIGN, is_unit, unit_tail

__all__ = [
    "FUNCTION_COMMANDS",
    "INVERSE",
    "MAX_ANSWER_CHARS",
    "QUALIFIER",
    "TEXT_CMD",
    "normalize_answer",
    "unwrap_box",
]

MAX_ANSWER_CHARS = 2048
"""Longest answer (in characters) either check looks at.  Real final answers are a
few dozen characters; a longer "answer" is a runaway generation, and refusing it
bounds the cost of grading (and keeps a request to a grading worker far below a
pipe buffer, so writing it never blocks)."""

# --- normalisation ----------------------------------------------------------------

TEXT_CMD = r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|mathbf|operatorname)"

_TEXT_OPEN = re.compile(TEXT_CMD + r"\s*\{")
_UNICODE = str.maketrans(
    {"−": "-", "–": "-", "∞": "\\infty ", "π": "\\pi ", "×": "\\times ", "∪": "\\cup ",
     "≠": "!=", "≤": "<=", "≥": ">=", "∅": "\\emptyset ", "ℝ": "\\mathbb{R}"}
)  # fmt: skip
# "Answer:", "The final answer is", `\text{Answer: }`, `**Answer:**`, GSM8K's "####" (or
# the "#" some copies of it keep, "# 14") before the answer itself.
_ANSWER_PREFIX = re.compile(
    r"^(?:\s*#{1,4}\s*)?"
    r"(?:(?:\*\*|(?P<text>\\text(?:bf)?\s*\{))?\s*(?:the\s+)?(?:final\s+)?answer(?:\s+is\b\s*:?|\s*:|\s+(?=[-$\\\d(]))\s*"
    r"(?(text)\}|(?:\*\*)?)\s*)?",
    re.IGNORECASE,
)
_RELATIONS = [
    (re.compile(r"\\(?:neq?|not=)(?![a-zA-Z])"), "!="),
    (re.compile(r"\\(?:leq?|leqslant)(?![a-zA-Z])"), "<="),
    (re.compile(r"\\(?:geq?|geqslant)(?![a-zA-Z])"), ">="),
    (re.compile(r"\\lt(?![a-zA-Z])"), "<"),
    (re.compile(r"\\gt(?![a-zA-Z])"), ">"),
]
_NO_SOLUTION = r"no\s+(?:real\s+)?(?:solution|root)s?\b"
""""No solution", "no real roots": an empty solution set, not a value taken back."""
_SET_WORDS = [
    (re.compile(r"\\lbrace(?![a-zA-Z])"), "\\{"),
    (re.compile(r"\\rbrace(?![a-zA-Z])"), "\\}"),
    (re.compile(r"\\langle(?![a-zA-Z])"), "("),  # a vector `\langle 1, 2 \rangle` is a tuple
    (re.compile(r"\\rangle(?![a-zA-Z])"), ")"),
    (re.compile(r"\\(?:emptyset|varnothing)(?![a-zA-Z])|\\\{\s*\\\}"), "\\emptyset "),
    (re.compile(rf"\b(?i:{_NO_SOLUTION})"), "\\emptyset "),
    (re.compile(r"\\[lr]?vert(?![a-zA-Z])"), "|"),
    (re.compile(r"\\mathbb\s*\{?\s*R\s*\}?|\\R(?![a-zA-Z])|\b(?i:all\s+real\s+numbers)\b"), "(-\\infty,\\infty)"),
]
# bmatrix, matrix and array (with its column spec) all become pmatrix; vmatrix is a
# determinant and stays.
_MATRIX_ENV = re.compile(
    r"\\(begin)\s*\{\s*array\s*\}\s*\{[lcr|\s]*\}|\\(begin|end)\s*\{\s*(?:[pbB]?matrix|array)\s*\}"
)
_BRACKETED_MATRIX = re.compile(r"[(\[](\\begin\{pmatrix\}(?:(?!\\end\{pmatrix\}).)*\\end\{pmatrix\})[)\]]")
_FRENCH_INTERVAL = re.compile(r"([\[\]])([^\[\]()]*,[^\[\]()]*)([\[\]])")

# Removed outright: sizing and spacing commands that never change a value.
_NOISE = re.compile(
    r"\\\\|\\left\.|\\right\.|\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\\[bB]igg?[lr]?(?![a-zA-Z])"
    r"|\\displaystyle|\\[!,;:> ]|\\q?quad(?![a-zA-Z])|~|\$"
)
_ORDINAL = re.compile(r"(?<=\d)\s*\^\s*\{\s*(?:\\(?:text|mathrm)\s*\{\s*)?(?:st|nd|rd|th)\s*\}?\s*\}")  # 12^{\text{th}}
_DEGREES = re.compile(
    rf"(?:\{{\s*\}})?(?:{DEGREE_SIGN})"
    # the word after a number, anywhere (`\cos(6 \text{ degrees})`, `60 \text{ degrees}, 120^\circ`)
    r"|(?<=[\d}])\s*(?:\\(?:text|mbox|mathrm|textrm)\s*\{\s*deg(?:ree)?s?\s*\}|degrees?(?![a-zA-Z]))"
)
_PERCENT = re.compile(r"\\%|%")
_DOLLAR = re.compile(r"\\\$|[€£¥₹¢]")  # currency signs
# `10,\!080` and `1{,}000` are explicit thousands separators wherever they appear.
_EXPLICIT_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|,\\!\s*)(?=\d{3}(?!\d))")
_THOUSANDS_NUMBER = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")  # `0,111` is a decimal comma
_DOTTED_THOUSANDS = re.compile(r"[-+]?[1-9]\d{0,2}(?:\.\d{3}){2,}")  # `1.000.000`: two points, no decimal
_TRAILING_BACKSLASH = re.compile(r"(?<!\\)\\$")
# LaTeX escaped once more (as in JSON or a Python string): `-2 \\le x \\le 7`.
_DOUBLED_ESCAPE = re.compile(r"\\\\(?=[a-zA-Z])")
_SINGLE_COMMAND = re.compile(r"(?<!\\)\\[a-zA-Z]")
# `1 1/2`, a mixed number written with a space (which would otherwise join it into 11/2).
_SPACED_MIXED = re.compile(r"([-+]?\d+)\s+(\d+)\s*/\s*(\d+)")
# `2.5 \times 10^{-3}`: a number in scientific notation, read as the decimal it is.
_TIMES_TEN = re.compile(r"([-+]?\d+(?:\.\d+)?)(?:\\times|\\cdot|\*|×)10\^\{?([-+]?\d{1,3})\}?")
_FRAC_ALIASES = re.compile(r"\\[dtc]frac(?![a-zA-Z])")
QUALIFIER = re.compile(
    rf"(?<!\\)\b(?:not|(?!{_NO_SOLUTION})no|never|wrong|incorrect|false"
    r"|maybe|perhaps|probably|possibly|except|unless|if|but"
    r"|at\s+(?:least|most)|(?:more|less|fewer|greater|smaller|larger)\s+than|between|almost|nearly|up\s+to)\b",
    re.IGNORECASE,
)
"""Words that take back or bound the value beside them ("2 (wrong)", "at least 2",
"between 5 and 6", "almost 5"): never a unit.  Not a command: ``\\not=`` is a
relation; not "no solution", an empty set."""
# A number followed by a unit: the head must hold a digit and no letters but those of
# a few numeric commands, so `\text{A} \text{ and } \text{B}` or `2x \text{ cm}`
# keep their words.
_UNIT_TAIL_TEXT = re.compile(
    r"^(?P<head>(?:[^a-zA-Z\\]|\\(?:frac|sqrt|pi|cdot|times)(?![a-zA-Z]))*?)"
    rf"\s*{TEXT_CMD}\{{\s*(?P<unit>[a-zA-Z][a-zA-Z./\s]*)\}}"
    r"(?:\s*\^\s*\{?\d\}?)?\s*$"
)
_OR = re.compile(r"\bor\b", re.IGNORECASE)
_TRAILING_VARIABLE = re.compile(r"([^a-zA-Z=<>!]*[0-9][^a-zA-Z=<>!]*)=\s*[a-zA-Z](?:_\{?\w+\}?)?\s*")
FUNCTION_COMMANDS = r"(?:arc)?(?:sin|cos|tan|cot|sec|csc)h?|log|ln|lg|exp|det"
"""LaTeX's function names: `\\sin(x) =` names no variable, as `\\theta =` does."""
INVERSE = r"\^\s*(?:\{\s*-\s*1\s*\}|-\s*1)"
"""The mark of an inverse function: ``f^{-1}``, ``f^-1``."""
_LEADING_VARIABLE = re.compile(
    rf"^(?:[a-zA-Z]|\\(?!(?:{FUNCTION_COMMANDS})(?![a-zA-Z]))[a-zA-Z]+)(?:_\{{?\w+\}}?)?"
    rf"(?:\s*(?:{INVERSE})?\s*\(\s*[a-z]\s*\))?\s*(?:=|\\in(?![a-zA-Z]))"
)  # `f^{-1}(x) =`: an inverse function names no unknown either
_SINGLE_CHAR_GROUP = re.compile(r"([\^_])\{(\w)\}")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")
_INFINITY = re.compile(r"\+?\\inf(?:ty)?(?![a-zA-Z])")
# `(C)`, or `\textbf{(C)}\ 12`: the choice with its value, but not `(A), (B)` or `(A)(B)`.
_CHOICE = re.compile(r"^\(([A-Za-z])\)$|^\(([A-E])\)(?![,;])(?!.*\([A-E]\))(?=.)")
_ROW_LIST = re.compile(r"\[(\[[^\[\]]*\](?:,\[[^\[\]]*\])*)\]")
# A time of day: minutes, seconds that are zero, a 12-hour clock's am/pm (`8:34 P.M.`,
# `2pm`, `\text{4:30 p.m.}`).
_CLOCK = re.compile(r"(\d{1,2})(?::(\d{2})(?::00)?)?\s*(?:([ap])\.?\s*m\.?)?", re.IGNORECASE)
_CLOCK_HINT = re.compile(r"\d\s*(?::\d|[ap]\.?\s*m)", re.IGNORECASE)


def normalize_answer(text: str) -> str:
    """Return the canonical string form of one final answer (the inside of a box).

    Two answers with the same canonical form are the same answer.  The form has no
    whitespace, no layout commands and no units; it is meant for comparison, not
    for display.  Pure and fast: no evaluation of any kind.
    """
    s = _TRAILING_BACKSLASH.sub("", spelled_math(text).translate(_UNICODE).strip()).strip()  # `185\`
    if "\\begin" not in s:  # outside an environment `\\` breaks no line: a doubled escape
        s = _DOUBLED_ESCAPE.sub(lambda _: "\\", s)
    elif "\\\\begin" in s and not _SINGLE_COMMAND.search(s):  # every command escaped twice
        s = s.replace("\\\\", "\\")
    s = unwrap_box(s)
    s = _ANSWER_PREFIX.sub("", s, count=1)
    for pattern, canonical in (*_RELATIONS, *_SET_WORDS):
        s = pattern.sub(lambda _, c=canonical: c, s)
    s = _MATRIX_ENV.sub(lambda m: "\\" + (m[1] or m[2]) + "{pmatrix}", s)
    # Explicit separators first: `\!` in `10,\!080` is noise removed just below.
    s = _EXPLICIT_THOUSANDS.sub("", s)
    # A LaTeX line break `\\` (matrix rows) is kept whole; other noise becomes a space.
    s = _DOLLAR.sub("", s)  # before the noise pass, which drops a bare `$`
    s = _NOISE.sub(lambda m: m[0] if m[0] == "\\\\" else " ", s)
    s = _DEGREES.sub("", s)
    s = _ORDINAL.sub("", s)
    s = _PERCENT.sub("", s)
    s = _FRAC_ALIASES.sub(r"\\frac", s).strip()
    s = _clock(s)  # before units: `pm` is none
    # Units go before `\text{}` is unwrapped, while they can still be told apart
    # from a text answer such as `\text{Evelyn}`.
    qualified = QUALIFIER.search(s) or _OR.search(s)  # `2 \text{ or more}` keeps its words
    while not qualified and (m := _UNIT_TAIL_TEXT.match(s)) and any(c.isdigit() for c in m["head"]):
        if not is_unit(m["unit"], m["head"]):
            break  # `3\mathrm{i}`, `5\text{x}`: a variable, not a unit
        s = m["head"].strip()
    # Unwrapped, `\text{answer: 12}` (a box holding the whole sentence) loses its label too.
    s = _ANSWER_PREFIX.sub("", _unwrapped(s), count=1)
    # After unwrapping, so `\text{5 cm}` loses its unit too (`\text{Evelyn}` has no number).
    if not qualified and (head := unit_tail(s)):
        s = head
    # Commas as thousands separators only in a lone number with no space after them.
    if _THOUSANDS_NUMBER.fullmatch(s):
        s = s.replace(",", "")
    elif _DOTTED_THOUSANDS.fullmatch(s):
        s = s.replace(".", "")
    if s.count("=") == 1 or "\\in" in s:
        s = _LEADING_VARIABLE.sub("", s, count=1)
    if s.count("=") == 1 and (m := _TRAILING_VARIABLE.fullmatch(s)):
        s = m[1]  # `2 = x`
    if m := _SPACED_MIXED.fullmatch(s):
        s = f"{m[1]}\\frac{{{m[2]}}}{{{m[3]}}}"
    s = "".join(s.split())
    if m := _TIMES_TEN.fullmatch(s):
        s = format(Decimal(m[1]).scaleb(int(m[2])), "f")
    s = _SINGLE_CHAR_GROUP.sub(r"\1\2", s)
    s = braced_fractions(s)
    s = EMPTY_SQRT.sub(r"\\sqrt", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = _INFINITY.sub(r"\\infty", s)
    s = _strip_outer_braces(s)
    if m := _CHOICE.match(s):
        s = m[1] or m[2]
    if m := _BRACKETED_MATRIX.fullmatch(s):  # `\left(\begin{array}...\end{array}\right)`
        s = m[1]
    elif m := _ROW_LIST.fullmatch(s):
        s = _rows_as_matrix(m[1])
    if m := _FRENCH_INTERVAL.fullmatch(s):  # `]a,b[` is `(a,b)`, `[a,b[` is `[a,b)`
        s = ("[" if m[1] == "[" else "(") + m[2] + ("]" if m[3] == "]" else ")")
    return s


def _clock(s: str) -> str:
    """A time of day: ``H:MMh`` when its half of the day is known (``8:34 p.m.``,
    ``20:34:00`` and ``20:34`` are ``20:34h``, ``2 pm`` is ``14:00h``, ``08:34`` is
    ``8:34h``), ``H:MM`` when it is not (``1:30``: either half, see
    ``_compare.same_time``); anything else unchanged.  The ``h`` is no unit: one letter."""
    if not _CLOCK_HINT.search(s) or not (m := _CLOCK.fullmatch(_unwrapped(s))):
        return s
    if m[2] is None and m[3] is None:
        return s  # a bare number
    hour, minute = int(m[1]), m[2] or "00"
    if m[3] is not None:
        if not 1 <= hour <= 12:
            return s
        hour = hour % 12 + (12 if m[3] in "pP" else 0)
    if hour > 23 or int(minute) > 59:
        return s
    known = m[3] is not None or not 1 <= hour <= 12 or m[1].startswith("0")
    return f"{hour}:{minute}" + ("h" if known else "")


def _rows_as_matrix(rows: str) -> str:
    """``[1,2],[3,4]`` (the rows of a list of lists) as the canonical ``pmatrix``;
    unchanged unless every row has as many cells."""
    cells = [row.split(",") for row in rows[1:-1].split("],[")]
    if len({len(r) for r in cells}) != 1:
        return "[" + rows + "]"
    return "\\begin{pmatrix}" + "\\\\".join("&".join(r) for r in cells) + "\\end{pmatrix}"


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


def unwrap_box(s: str) -> str:
    """`\\boxed{\\boxed{5}}` -> `5`, `\\mathbf{34\\text{ units}}` -> `34\\text{ units}`;
    anything that is not one whole box or bold type is unchanged."""
    while m := re.match(r"\\(?:boxed|fbox|mathbf|textbf|boldsymbol|bm)\s*\{", s):
        end = _matching_brace(s, m.end() - 1)
        if end != len(s) - 1:
            break
        s = s[m.end() : end].strip()
    return s


def _unwrapped(s: str) -> str:
    """`s` with its `\\text{}` unwrapped, without a final period."""
    return _unwrap_text(s).strip().rstrip(".").strip()


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
