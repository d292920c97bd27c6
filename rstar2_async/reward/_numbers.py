"""Plain numbers in canonical answer forms (``_normalise``), read exactly: decimals,
fractions (``3/4``, ``\\frac{3}{4}``), mixed numbers and repeating decimals as rationals
(`to_number`); a number spelt as a word or in e-notation as digits (`numeral`)."""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

__all__ = ["INTEGER", "numeral", "numeral_of", "to_number"]

MAX_DIGITS = 200
"""Digit strings longer than this are compared as text, never converted to numbers
(Python refuses int() on more than 4300 digits, and nothing real is that long)."""

_INT = r"[-+]?\d+"
_DEC = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)"
_DECIMAL = re.compile(_DEC)
INTEGER = re.compile(_INT)
"""An integer literal."""
_SLASH = re.compile(rf"({_INT})/({_INT})")
_FRAC = re.compile(rf"([-+]?)\\frac\{{({_DEC})\}}\{{({_DEC})\}}")
_MIXED = re.compile(r"([-+]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}")
_REPEATING = re.compile(r"([-+]?)(\d*)\.(\d*)\\overline\{(\d{1,50})\}")  # 0.1\overline{6} = 1/6
_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_NUMBER_WORD = re.compile(rf"({'|'.join(_TENS)})(?:-({'|'.join(_ONES[1:10])}))?|({'|'.join(_ONES)})")
_SCIENTIFIC = re.compile(r"[-+]?\d+(?:\.\d+)?e[-+]?\d{1,3}")


def to_number(s: str) -> Fraction | None:
    """Read a canonical form as an exact rational, or None if it is not a plain number."""
    if len(s) > MAX_DIGITS:
        return None
    try:
        if _DECIMAL.fullmatch(s):
            return Fraction(s)
        if m := _SLASH.fullmatch(s):
            return Fraction(int(m[1]), int(m[2]))
        if m := _FRAC.fullmatch(s):
            value = Fraction(m[2]) / Fraction(m[3])
            return -value if m[1] == "-" else value
        if m := _REPEATING.fullmatch(s):
            fixed, repeating = m[3], m[4]
            value = int(m[2] or 0) + Fraction(int(fixed or 0), 10 ** len(fixed))
            value += Fraction(int(repeating), (10 ** len(repeating) - 1) * 10 ** len(fixed))
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


def numeral_of(q: Fraction) -> str:
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def numeral(answer: str) -> str:
    """A whole answer spelt as a word (``five``, ``twenty-one``, ``infinity``) or in
    e-notation (``1.5e3``) as digits, as people write them: lenient mode reads both."""
    lower = answer.lower()
    if lower.lstrip("+-") == "infinity":
        return lower.replace("infinity", "\\infty").lstrip("+")
    if m := _NUMBER_WORD.fullmatch(lower):
        tens = _TENS.index(m[1]) * 10 + 20 if m[1] else 0
        return str(tens + _ONES.index(m[2] or m[3] or "zero"))
    if _SCIENTIFIC.fullmatch(lower):
        return format(Decimal(lower), "f")
    return answer
