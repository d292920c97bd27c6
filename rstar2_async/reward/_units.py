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

Dropping a unit pays a bare number for a gold with one; it must not pay another unit:
``90 \\text{ radians}`` is no ``90^\\circ`` and ``8 \\text{ mm}`` no ``8\\text{ cm}``.
`stated_unit` names a unit of measure written after an answer's last number, so two
answers that state different ones differ whatever their numbers (count nouns, ``units``
and words it does not know name none).
"""

from __future__ import annotations

import re

__all__ = ["DEGREE_SIGN", "SHORT_UNITS", "is_unit", "math_verify_drops_units", "stated_unit", "unit_tail"]

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


_MEASURES = {
    "mm": "mm millimeter millimetre",
    "cm": "cm centimeter centimetre",
    "m": "m meter metre",
    "km": "km kilometer kilometre",
    "in": "in inch inches",
    "ft": "ft foot feet",
    "yd": "yd yard",
    "mi": "mi mile",
    "mg": "mg milligram",
    "g": "g gm gram",
    "kg": "kg kilogram kilo",
    "lb": "lb lbs pound",
    "oz": "oz ounce",
    "ml": "ml milliliter millilitre",
    "l": "l liter litre",
    "gal": "gal gallon",
    "s": "s sec second",
    "min": "min minute",
    "h": "h hr hrs hour",
    "day": "day",
    "week": "week wk",
    "month": "month",
    "year": "year yr yrs",
    "degree": "degree deg",
    "radian": "radian rad",
    "dollar": "dollar usd \\$",
    "cent": "cent ¢",
    "euro": "euro eur € \\euro",
    "yen": "yen ¥",
    "mph": "mph",
    "km/h": "kph kmh",
}
_UNIT_NAME = {alias: name for name, aliases in _MEASURES.items() for alias in aliases.split()}
_POWER_WORD = {"square": 2, "sq": 2, "cubic": 3, "cu": 3}
# What a unit is written in: `\text{ cm}`, `\mbox{ inches}^2`, `^\circ`, `°`, `\,`.
_UNIT_WRAPPER = re.compile(r"\\(?:text|mbox|mathrm|textrm|textnormal|operatorname)\s*\{([^{}]*)\}")
DEGREE_SIGN = r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°"
"""A degree sign, as `_normalise` drops it and `stated_unit` names it."""
_DEGREE_SIGN = re.compile(DEGREE_SIGN)
_SPACING = re.compile(r"\\[,;:! ]|~")
_CURRENCY = re.compile(r"\s*[-+]?\s*(\\\$|[€¥]|\\euro(?![a-zA-Z]))\s*[\d.]")
_CENTS = re.compile(r"\d\s*(¢)\s*$")
_BASE = re.compile(r"(?<![\w\\])[0-9A-F]+_\{?(\d{1,2})\}?\s*$")  # a numeral's base: `1005_8`, `2A_{16}`
_STATED = re.compile(
    r"(?:\d|\}|\)|\\pi)\s*(?P<words>[a-zA-Z]+\.?(?:\s+[a-zA-Z]+\.?)?)(?:\s*/\s*(?P<per>[a-zA-Z]+))?"
    r"\s*(?:\^\s*\{?(?P<power>[23])\}?|(?P<sup>[²³]))?[\s.]*$"
)


def stated_unit(answer: str) -> str | None:
    """The unit of measure written after the last number of `answer` (``5\\text{ cm}^2``
    is ``cm^2``, ``\\frac{270}7\\text{ degrees}`` is ``degree``), by one name for its
    spellings, or its currency sign (``\\$5`` is ``dollar``), or the base its numeral is
    written in (``1005_8`` is ``base 8``); None for no unit, or one it does not know
    (``12 apples``, ``20 \\text{ sq units}``)."""
    s = _UNIT_WRAPPER.sub(r" \1 ", answer)
    s = _SPACING.sub(" ", _DEGREE_SIGN.sub(" degree ", s))
    if base := _BASE.search(s):
        return f"base {int(base[1])}"
    if (m := _STATED.search(s)) is None:
        sign = _CURRENCY.match(s) or _CENTS.search(s)
        return _UNIT_NAME[sign[1]] if sign else None
    words = m["words"].replace(".", "").lower().split()
    power = int(m["power"] or {"²": 2, "³": 3}.get(m["sup"] or "", 1))
    if len(words) == 2 and words[0] in _POWER_WORD and power == 1:
        power = _POWER_WORD[words.pop(0)]
    if len(words) != 1 or (name := _unit_name(words[0])) is None:
        return None
    if m["per"]:
        if (per := _unit_name(m["per"].lower())) is None:
            return None
        name = f"{name}/{per}"
    return name if power == 1 else f"{name}^{power}"


def _unit_name(word: str) -> str | None:
    """One name for a unit's spellings, plurals too (``miles``, ``cms``; ``ms`` is none)."""
    if word in _UNIT_NAME:
        return _UNIT_NAME[word]
    return _UNIT_NAME.get(word[:-1]) if word.endswith("s") and len(word) > 2 else None
