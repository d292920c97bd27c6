"""Unit words after a number, and where a short word is a variable instead.

Graders drop a unit written after a number (``5 cm``, ``12 apples``, ``10m``): the
answer is the number.  A short word can as well be variables multiplied (``2xy``,
``4ab``, ``1 + 2t``), and dropping it pays a wrong answer: ``\\boxed{4bc}`` for a gold
of ``4ab`` read as 4 and 4.  So a word of at most three letters is a unit only if it is
a known one (`SHORT_UNITS`), a rate (``72 Mb/h``) or the first of several words; a
letter alone only after a lone number (``10m``, ``3 s``), never after an expression
(`is_unit`).  In ``\\text{}`` as well: ``3\\mathrm{i}`` is no 3.
Our normaliser reads units by `unit_tail`; math-verify, which drops any word on a list
of its own (``t``, ``h``, ``ab``, ``bc``), may drop one where `math_verify_drops_units`
says so.
"""

from __future__ import annotations

import re

__all__ = ["SHORT_UNITS", "is_unit", "math_verify_drops_units", "unit_tail"]

SHORT_UNITS = frozenset(
    ["cm", "mm", "km", "dm", "nm", "kg", "mg", "ml", "cl", "dl", "ft", "yd", "mi", "oz", "lb", "lbs", "hr", "hrs"]
    + ["min", "sec", "deg", "rad", "mph", "kph", "kmh", "cal", "mol", "ha", "cc", "sq", "cu", "usd", "eur", "rs"]
    + ["yen", "yr", "yrs", "day", "gm", "mt", "lt", "kw", "kwh", "hz", "khz", "mhz", "mb", "kb", "gb", "tb", "in"]
)
"""Units of two or three letters; a longer word after a number is a unit whatever it is."""
_LETTER_UNITS = frozenset("mgshltcd")
"""One-letter units math-verify drops (metre, gram, second, hour, litre, tonne, ...)."""
_AFTER_NUMBER = frozenset(["am", "pm", "st", "nd", "rd", "th"])
"""A time's half of the day and an ordinal's suffix: no variables after a lone number."""
_PLAIN_NUMBER = re.compile(r"\s*[-+]?(?:\d|\{,\}|\\[,!]|[ ,.])*\d[\s.]*")


def is_unit(unit: str, after: str) -> bool:
    """Whether `unit`, written right after the text `after`, is a unit: a phrase (``sq.
    units``, ``Mb/h``, ``square feet``), any word of four letters or more, a known short
    one, or one of a few letters after a lone number (``10 m``), never a variable
    (``4ab``, ``2 + 3t``, ``3\\mathrm{i}``)."""
    word = unit.strip().lower()
    if not word.isalpha():
        return True  # several words, a rate or an abbreviation
    lone_number = bool(_PLAIN_NUMBER.fullmatch(after))
    return len(word) > 3 or word in SHORT_UNITS or (lone_number and (word in _LETTER_UNITS or word in _AFTER_NUMBER))


# A unit may hold a slash (`72 Mb/h`, `60 km/h`); a one-letter unit before it only
# after a space and if it is one (`5 m/s`, `2 g/L`; `5 x/y` is math).
_UNIT_TAIL_WORDS = re.compile(
    r"^(?P<head>[-+]?[\d.,/:]*\d)"
    r"(?:\s*(?!pi\b)(?P<unit>[a-zA-Z]{2,})(?P<rate>/[a-zA-Z]{1,4})?|\s+[mgsLNJWVAK]/[a-zA-Z]{1,4})"
    r"(?P<more>(?:\s+[a-zA-Z]+)*)(?:\s*\^\s*\{?\d\}?)?\s*\.?$"
)


def unit_tail(s: str) -> str | None:
    """The number before a unit written in words (``5 cm``, ``12 apples``), if `s` is one."""
    m = _UNIT_TAIL_WORDS.match(s)
    if m is None:
        return None
    known = m["unit"] is None or is_unit(m["unit"] + (m["rate"] or "") + m["more"], m["head"])
    return m["head"] if known else None  # a phrase (`1 and odd primes`) is no product either


_LAST_SHORT_WORD = re.compile(r"(?<![a-zA-Z\\])([a-zA-Z]{1,2})\s*$")


def math_verify_drops_units(text: str) -> bool:
    """Whether math-verify may drop a unit word at the end of `text` (its
    ``NormalizationConfig.units``).  A word of one or two letters there must be a unit
    here too: math-verify reads ``1 + 2t`` as ``1 + 2`` (equal to 3), ``\\frac12 h`` as
    ``\\frac12`` and ``2ab`` as 2."""
    m = _LAST_SHORT_WORD.search(text)
    return m is None or is_unit(m[1], text[: m.start()])
