"""An inequality in one variable read as the interval it describes (``x > 2`` as
``(2,\\infty)``, ``3 \\leq x < 4``, ``|x - 3| < 2``, several joined by "or" as a union,
a set written by its condition), on canonical forms (``_normalise``)."""

from __future__ import annotations

import re
from fractions import Fraction

from ._numbers import numeral_of, to_number

__all__ = ["as_interval"]

_BOUND = r"[^<>=!,]+?"
_CHAIN = re.compile(rf"(?P<lo>{_BOUND})(?P<op1><=?|>=?)(?P<var>[a-zA-Z])(?P<op2><=?|>=?)(?P<hi>{_BOUND})")
_LEFT = re.compile(rf"(?P<var>[a-zA-Z])(?P<op><=?|>=?)(?P<bound>{_BOUND})")
_RIGHT = re.compile(rf"(?P<bound>{_BOUND})(?P<op><=?|>=?)(?P<var>[a-zA-Z])")
_ABS = re.compile(rf"\|(?P<var>[a-zA-Z])(?P<shift>[-+][^|<>=!,]+)?\|(?P<op><=?|>=?)(?P<bound>{_BOUND})")
# `\{x \mid x > 2\}`, `\{x \in \mathbb{R} : x > 2\}` (canonical: no spaces, `\mathbb{R}` an interval)
_SET_BUILDER = re.compile(r"\\\{(?P<var>[a-zA-Z])(?:\\in\(-\\infty,\\infty\))?(?:\||\\mid|:|\\colon)(?P<cond>.+)\\\}")
_OR = re.compile(r"\\cup|\\lor|\\vee|or")


def _ray(bound: str, op: str) -> str:
    """`x op bound` as an interval."""
    closed = op.endswith("=")
    if op[0] == ">":
        return ("[" if closed else "(") + bound + ",\\infty)"
    return "(-\\infty," + bound + ("]" if closed else ")")


def _one_interval(s: str) -> tuple[str, str] | None:
    """(variable, interval) of one canonical inequality in one variable, or None."""
    if (m := _CHAIN.fullmatch(s)) and m["op1"][0] == m["op2"][0]:
        lo, hi, op1, op2 = m["lo"], m["hi"], m["op1"], m["op2"]
        if op1[0] == ">":  # `3 > x > 1` is `1 < x < 3`
            lo, hi, op1, op2 = hi, lo, op2.replace(">", "<"), op1.replace(">", "<")
        left = "[" if op1.endswith("=") else "("
        return m["var"], left + lo + "," + hi + ("]" if op2.endswith("=") else ")")
    if m := _LEFT.fullmatch(s):
        return m["var"], _ray(m["bound"], m["op"])
    if m := _RIGHT.fullmatch(s):  # `2 < x` is `x > 2`
        flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[m["op"]]
        return m["var"], _ray(m["bound"], flipped)
    if (m := _ABS.fullmatch(s)) and (bound := to_number(m["bound"])) is not None and bound > 0:
        # `|x - c| op a`: x within (or beyond) a of c; the ends as exact numbers
        shift = to_number(m["shift"]) if m["shift"] else Fraction(0)
        if shift is None:
            return None
        closed, low, high = m["op"].endswith("="), numeral_of(-shift - bound), numeral_of(-shift + bound)
        if m["op"][0] == "<":  # `|x| < 8` is `(-8, 8)`
            return m["var"], ("[" if closed else "(") + low + "," + high + ("]" if closed else ")")
        return m["var"], _ray(low, "<=" if closed else "<") + "\\cup" + _ray(high, m["op"])
    return None


def as_interval(s: str) -> tuple[str, str] | None:
    """(variable, interval or union) of a canonical inequality, several joined by
    "or", or a set written by its condition (``\\{x \\mid x > 2\\}``); None unless
    every part is an inequality in the same one variable."""
    if "<" not in s and ">" not in s:
        return None
    named = None
    if m := _SET_BUILDER.fullmatch(s):
        named, s = m["var"], m["cond"]
    parts = [_one_interval(p) for p in _OR.split(s)]
    variables = {p[0] for p in parts if p}
    if any(p is None for p in parts) or len(variables) != 1 or (named and variables != {named}):
        return None
    return variables.pop(), "\\cup".join(p[1] for p in parts if p)
