"""A value one step off a gold answer's (`CHANGED_VALUE_REWRITES`): a right grader pays
none."""

from __future__ import annotations

import re

from ._same_value import _FRACTION, Rewrite, _replaced, _unit_replaced, _whole

_WHOLE_NUMBER = re.compile(r"-?[1-9]\d*")
_NUMBER = re.compile(r"(?<![\d.])(?<!_)(?<!_\{)\d+(?![\d.])")
"""A whole number that is no subscript (``a_1`` names a variable) and no part of a decimal."""


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


def _transposed(gold: str) -> str | None:
    """A 2x2 matrix transposed, where that changes it."""
    m = re.fullmatch(
        r"(\\begin\{[pb]matrix\})\s*([^&\\]+)&([^&\\]+)\\\\([^&\\]+)&([^&\\]+?)\s*(\\end\{[pb]matrix\})", gold.strip()
    )
    if not m or m[3].strip() == m[4].strip():
        return None
    return f"{m[1]} {m[2]}&{m[4]}\\\\{m[3]}&{m[5]} {m[6]}"


def _last_decimal_digit(gold: str) -> str | None:
    """A decimal with its last digit one larger (``0.375`` as ``0.376``), where that moves
    it by more than lenient mode's relative tolerance (1e-4), a grader's policy."""
    m = re.fullmatch(r"(-?\d+\.(\d*))([0-8])", gold.strip())
    if not m or float(gold) == 0 or 10.0 ** -(len(m[2]) + 1) < 1e-3 * abs(float(gold)):
        return None
    return f"{m[1]}{int(m[3]) + 1}"


def _real_part(gold: str) -> str | None:
    """A complex number without its imaginary unit: ``3+4i`` as ``3+4``."""
    m = re.fullmatch(r"(.*\d)\s*i", gold.strip())
    return m[1] if m and re.search(r"[-+]", m[1].lstrip("-")) else None


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
    "transposed": _transposed,
    "last_decimal_digit": _last_decimal_digit,
    "imaginary_dropped": _real_part,
    # a whole number times the imaginary unit set upright, or a scale: neither is a unit
    "times_imaginary": _whole(_WHOLE_NUMBER, lambda m: f"{m[0]}\\mathrm{{i}}"),
    "scaled": _whole(_WHOLE_NUMBER, lambda m: f"{m[0]} thousand"),
    # the number in another unit of its kind: `8\text{ cm}` as `8\text{ mm}`, `90^\circ` as `90 \text{ radians}`
    "other_unit": _unit_replaced(
        {"cm": "mm", "inches": "feet", "feet": "inches", "miles": "kilometers", "pounds": "kilograms"}
        | {"hours": "minutes", "days": "hours", "dollars": "cents", "cents": "dollars", "degrees": "radians"}
        | {"^\\circ": " \\text{ radians}"}
    ),
    "dollars_as_cents": _whole(r"\\\$\s*([\d.,\\!]+)", lambda m: f"{m[1]} \\text{{ cents}}"),  # `\$36` as `36 cents`
    "tuple_as_set": _whole(r"\(([^(),]+),([^(),]+)\)", lambda m: f"\\{{{m[1].strip()}, {m[2].strip()}\\}}"),  # no order
    # the value given for another variable: `y = 2x + 3` as `q = 2x + 3`
    "variable_named_other": _whole(r"([a-zA-Z])(\s*=[^=]*)", lambda m: f"{'w' if m[1] in 'qQ' else 'q'}{m[2]}"),
    "other_base": _whole(  # `52_8` as `52_{16}`
        r"([0-9A-F]+)_\{?(\d+)\}?", lambda m: f"{m[1]}_{{{16 if int(m[2]) != 16 else 36}}}"
    ),
}
