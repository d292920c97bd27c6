"""A gold answer rewritten as a model might write it: the same value in another notation
(`same_value_rewrites`), or a value one step off (`changed_value_rewrites`), each in the
formats models end a reply with (`ANSWER_FORMATS`).

A grader that is right pays every rewrite of the first kind and none of the second,
whatever the gold; no label is needed, so any set of real gold answers checks it
(``benchmarks/grader_rewrites.py`` runs them over ``../shared/data``).  A rewrite
returns None for a gold it does not apply to.  Only notations no grader policy is
needed for belong here: units, currency, multiple-choice letters and reordered lists
are choices a grader makes (tests/reward/data/GRADER_CHECKS.md), not equivalences.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = [
    "ANSWER_FORMATS",
    "CHANGED_VALUE_REWRITES",
    "SAME_VALUE_REWRITES",
    "changed_value_rewrites",
    "same_value_rewrites",
]

Rewrite = Callable[[str], "str | None"]

ANSWER_FORMATS: dict[str, Callable[[str], str]] = {
    "boxed": lambda v: f"So the answer is $\\boxed{{{v}}}$.",
    "prose": lambda v: f"The final answer is ${v}$.",
}
"""How a reply states its answer: ``boxed`` is rStar2's format (both grading modes);
``prose``, an answer without a box, is lenient mode's only."""

_FRACTION = re.compile(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}")
_INTEGER = re.compile(r"-?\d+")
_NUMBER = re.compile(r"(?<![\d.])(?<!_)(?<!_\{)\d+(?![\d.])")
"""A whole number that is no subscript (``a_1`` names a variable) and no part of a decimal."""


def _applied(rewrites: dict[str, Rewrite], gold: str) -> list[tuple[str, str]]:
    return [(name, new) for name, rewrite in rewrites.items() if (new := rewrite(gold)) is not None and new != gold]


def _replaced(old: str, new: str) -> Rewrite:
    def rewrite(gold: str) -> str | None:
        return gold.replace(old, new) if old in gold else None

    return rewrite


def _display_fraction(gold: str) -> str | None:
    return re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", gold).replace("\\frac", "\\dfrac") if "frac" in gold else None


def _slash_fraction(gold: str) -> str | None:
    m = _FRACTION.fullmatch(gold.strip())
    return f"{m[1]}{m[2]}/{m[3]}" if m else None


def _short_fraction(gold: str) -> str | None:
    """``\\frac{1}{2}`` as ``\\frac12``."""
    new = re.sub(r"\\frac\{(\d)\}\{(\d)\}", r"\\frac\1\2", gold)
    return new if new != gold else None


def _short_root(gold: str) -> str | None:
    new = re.sub(r"\\sqrt\{(\d)\}", r"\\sqrt\1", gold)
    return new if new != gold else None


def _sign_in_numerator(gold: str) -> str | None:
    m = re.fullmatch(r"-\\[dt]?frac\{(\d+)\}\{(\d+)\}", gold.strip())
    return f"\\frac{{-{m[1]}}}{{{m[2]}}}" if m else None


def _decimal(gold: str) -> str | None:
    """A fraction whose decimal ends (``\\frac{3}{8}`` is 0.375), written as it."""
    m = _FRACTION.fullmatch(gold.strip())
    if not m or int(m[3]) == 0:
        return None
    den = int(m[3])
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    return f"{m[1]}{int(m[2]) / int(m[3])!r}" if den == 1 and len(m[2]) + len(m[3]) <= 6 else None


def _point_zero(gold: str) -> str | None:
    return f"{gold.strip()}.0" if _INTEGER.fullmatch(gold.strip()) else None


def _grouped(separator: str) -> Rewrite:
    """A whole number of four digits or more with its thousands grouped."""

    def rewrite(gold: str) -> str | None:
        if not re.fullmatch(r"-?\d{4,}", gold.strip()):
            return None
        return f"{int(gold):,}".replace(",", separator)

    return rewrite


def _without_spaces(gold: str) -> str | None:
    if " " not in gold or "\\text" in gold or ", " in gold or re.search(r"\\[a-zA-Z]+ +[a-zA-Z]", gold):
        return None  # `\pi r` needs its space, words in `\text{}` theirs, and `81, 256` is no 81,256
    return gold.replace(" ", "")


def _without_sizing(gold: str) -> str | None:
    """``\\left( 3, \\frac{\\pi}{2} \\right)`` as ``( 3, \\frac{\\pi}{2} )``."""
    if "\\left" not in gold or re.search(r"\\(?:left|right)\.", gold):
        return None  # `\left.` is an invisible delimiter, not a bracket
    return re.sub(r"\\(?:left|right)(?![a-zA-Z])", "", gold)


def _roman_words(gold: str) -> str | None:
    m = re.fullmatch(r"\\text\{([a-zA-Z ]+)\}", gold.strip())
    return f"\\mathrm{{{m[1]}}}" if m else None


def _stated_value(gold: str) -> str | None:
    """``x = 5`` for a numeric gold: a value stated as the unknown's."""
    plain = re.sub(r"\\(?:frac|dfrac|sqrt|pi)(?![a-zA-Z])", "", gold)
    return f"x = {gold}" if re.fullmatch(r"[-\d{}./^ ]+", plain) and re.search(r"\d", plain) else None


def _approximately(gold: str) -> str | None:
    """``\\approx 268`` for an integer gold: a rounding that is no rounding at all."""
    return f"\\approx {gold.strip()}" if _INTEGER.fullmatch(gold.strip()) else None


def _braced(text: str, start: int) -> int:
    """The index after the ``{...}`` group that opens at `start`."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return -1


def _divided(gold: str) -> str | None:
    """Every ``\\frac{A}{B}`` as ``(A)/(B)``: ``\\frac{\\sqrt{3}}{2}`` is ``(\\sqrt{3})/(2)``."""
    m = re.search(r"\\[dt]?frac\{", gold)
    if not m:
        return None
    numerator_end = _braced(gold, m.end() - 1)
    if numerator_end < 0 or gold[numerator_end : numerator_end + 1] != "{":
        return None
    denominator_end = _braced(gold, numerator_end)
    if denominator_end < 0:
        return None
    numerator, denominator = gold[m.end() : numerator_end - 1], gold[numerator_end + 1 : denominator_end - 1]
    rest = gold[denominator_end:]
    if re.match(r"\s*[\w\\({]", rest) or re.search(r"[\w}]\s*$", gold[: m.start()]) or "," in numerator + denominator:
        return None  # a product (`\frac{1}{2}i`, `\sec \frac{1}{2} \theta`) or a mixed number (`1\frac{4}{5}`)
    return f"{gold[: m.start()]}({numerator})/({denominator}){_divided(rest) or rest}"


def _top_level(gold: str, ops: str) -> list[int]:
    """Where the characters of `ops` stand outside every bracket of `gold`."""
    depth, found = 0, []
    for i, c in enumerate(gold):
        depth += c in "{([" and 1 or (c in "})]" and -1)
        if depth == 0 and c in ops and i > 0:
            found.append(i)
    return found


def _swapped_sum(gold: str) -> str | None:
    """``1 + \\sqrt{2}`` as ``\\sqrt{2} + 1``: a sum of two terms, each without a sign."""
    g = gold.strip()
    if re.search(r"[=,<>]|\\(?:text|[lg]eq?|pm|mp|cup|cap|in|to)(?![a-zA-Z])|^-", g):
        return None
    signs = _top_level(g, "+-")
    if len(signs) != 1 or g[signs[0]] != "+" or g[signs[0] - 1] in "^_" or g[signs[0] - 1 : signs[0]] == "\\":
        return None
    return f"{g[signs[0] + 1 :].strip()} + {g[: signs[0]].strip()}"


def _explicit_product(gold: str) -> str | None:
    """``2\\sqrt{3}`` as ``2 \\cdot \\sqrt{3}``, ``3\\pi`` as ``3 \\cdot \\pi``."""
    new = re.sub(r"(?<![\d.])(\d+)\s*(\\(?:sqrt|pi)(?![a-zA-Z]))", r"\1 \\cdot \2", gold)
    return new if new != gold else None


def _scientific(gold: str) -> str | None:
    """``5000000`` as ``5 \\times 10^{6}``."""
    m = re.fullmatch(r"(-?[1-9]\d*?)(0{3,})", gold.strip())
    return f"{m[1]} \\times 10^{{{len(m[2])}}}" if m else None


def _negative_power(gold: str) -> str | None:
    """``\\frac{1}{8}`` as ``8^{-1}``."""
    m = re.fullmatch(r"\\[dt]?frac\{1\}\{([2-9]|[1-9]\d+)\}", gold.strip())
    return f"{m[1]}^{{-1}}" if m else None


def _trailing_zero(gold: str) -> str | None:
    return f"{gold.strip()}0" if re.fullmatch(r"-?\d+\.\d+", gold.strip()) else None


def same_value_rewrites(gold: str) -> list[tuple[str, str]]:
    """(name, answer) for each notation of the gold's own value that applies to it."""
    return _applied(SAME_VALUE_REWRITES, gold)


SAME_VALUE_REWRITES: dict[str, Rewrite] = {
    "dfrac": _display_fraction,
    "slash_fraction": _slash_fraction,
    "short_fraction": _short_fraction,
    "short_root": _short_root,
    "sign_in_numerator": _sign_in_numerator,
    "decimal": _decimal,
    "point_zero": _point_zero,
    "thousands_comma": _grouped(","),
    "thousands_braced_comma": _grouped("{,}"),
    "thousands_thin_space": _grouped("\\,"),
    "no_spaces": _without_spaces,
    "no_left_right": _without_sizing,
    "unicode_pi": _replaced("\\pi", "π"),
    "unicode_infinity": _replaced("\\infty", "∞"),
    "leq_geq": lambda g: _replaced("\\le ", "\\leq ")(g) or _replaced("\\ge ", "\\geq ")(g),
    "mathrm_for_text": _roman_words,
    "displaystyle": lambda g: f"\\displaystyle {g}",
    "stated_value": _stated_value,
    "approximately": _approximately,
    "frac_as_division": _divided,
    "swapped_sum": _swapped_sum,
    "explicit_product": _explicit_product,
    "scientific": _scientific,
    "negative_power": _negative_power,
    "trailing_zero": _trailing_zero,
    "unicode_degree": lambda g: _replaced("^\\circ", "°")(g) or _replaced("^{\\circ}", "°")(g),
    "bmatrix": _replaced("pmatrix", "bmatrix"),
}


def _bumped(which: int) -> Rewrite:
    """One whole number (the first or the last) made one larger."""

    def rewrite(gold: str) -> str | None:
        if re.search(r"\\(?:text|mbox|mathrm)", gold):
            return None  # `15\mbox{ cm}^2`: a number of its unit's, which graders drop
        numbers = list(_NUMBER.finditer(gold))
        if len(numbers) < (2 if which == 0 else 1):
            return None
        m = numbers[which]
        return f"{gold[: m.start()]}{int(m[0]) + 1}{gold[m.end() :]}"

    return rewrite


def _negated(gold: str) -> str | None:
    """The gold's sign flipped, where that changes its value: not for 0, nor ``\\pm``."""
    g = gold.strip()
    if not re.search(r"[1-9]", g) or re.search(r"\\(?:pm|mp)(?![a-zA-Z])|,|=", g):
        return None
    if g.startswith("-"):
        return g[1:]
    return f"-{g}" if re.fullmatch(r"[\d\\{}a-z. ^]+", g) else None


def _one_item_fewer(gold: str) -> str | None:
    """A list of values without its last one (a list with a value twice is left alone:
    as a set of solutions it may not change)."""
    items = [p.strip() for p in gold.split(",")]
    if len(items) < 2 or any(c in gold for c in "{}()[]") or len(set(items)) < len(items):
        return None
    return ", ".join(items[:-1])


def _swapped_pair(gold: str) -> str | None:
    m = re.fullmatch(r"\(([^,()]+),([^,()]+)\)", gold.strip())
    return f"({m[2].strip()}, {m[1].strip()})" if m and m[1].strip() != m[2].strip() else None


def _other_bracket(gold: str) -> str | None:
    """An interval with its left end's bracket flipped, where that end is finite."""
    m = re.fullmatch(r"([(\[])([^,]+),([^,]+)([)\]])", gold.strip())
    if not m or "infty" in m[2]:
        return None
    return f"{'[' if m[1] == '(' else '('}{m[2]},{m[3]}{m[4]}"


def _reciprocal(gold: str) -> str | None:
    m = _FRACTION.fullmatch(gold.strip())
    return f"{m[1]}\\frac{{{m[3]}}}{{{m[2]}}}" if m and m[2] != m[3] and int(m[2]) else None


def _unrooted(gold: str) -> str | None:
    """The first square root dropped: ``2\\sqrt{3}`` as ``2(3)``."""
    m = re.search(r"\\sqrt\{([^{}]+)\}", gold)
    return None if not m or m[1].strip() in ("0", "1") else f"{gold[: m.start()]}({m[1]}){gold[m.end() :]}"


_VARIABLES = re.compile(
    r"(?<![a-zA-Z\\])(?!(?:ln|log|sin|cos|tan|exp|det|gcd|lcm|mod)(?![a-zA-Z]))[a-zA-Z]{1,3}(?![a-zA-Z])"
)
"""Variables written side by side (``x``, ``ab``, ``xyz``): no command, function or word."""


def _other_variable(gold: str) -> str | None:
    """The last variable renamed to a letter the gold does not use: ``4ab`` as ``4aq``
    (``e`` and ``i`` alone are constants)."""
    if re.search(r"\\(?:text|mbox|mathrm|operatorname|in|[lg]eq?)(?![a-zA-Z])|[=<>]", gold):
        return None  # words, and relations whose variable may be named at will
    names = [m for m in _VARIABLES.finditer(gold) if m[0] not in ("e", "i")]
    fresh = next((c for c in "qwkz" if c not in gold), None)
    if not names or fresh is None:
        return None
    end = names[-1].end()
    return f"{gold[: end - 1]}{fresh}{gold[end:]}"


def changed_value_rewrites(gold: str) -> list[tuple[str, str]]:
    """(name, answer) for each value one step off the gold's that applies to it."""
    return _applied(CHANGED_VALUE_REWRITES, gold)


CHANGED_VALUE_REWRITES: dict[str, Rewrite] = {
    "last_number_plus_one": _bumped(-1),
    "first_number_plus_one": _bumped(0),
    "negated": _negated,
    "one_item_fewer": _one_item_fewer,
    "swapped_pair": _swapped_pair,
    "other_bracket": _other_bracket,
    "reciprocal": _reciprocal,
    "root_dropped": _unrooted,
    "e_for_pi": _replaced("\\pi", "e"),
    "other_variable": _other_variable,
}
