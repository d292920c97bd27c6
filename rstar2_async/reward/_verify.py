"""math-verify's verdict on two final answers, as the grading worker's child reaches
it (`_worker`): both parsed as boxed answers; complex numbers in ``i`` compared as
such; and, where lenient mode's tolerance applies, numbers within it (see
`GradeRequest.rel_tol`).

Importing this module imports neither math-verify nor sympy; the child imports them
on its first verdict.
"""

from __future__ import annotations

import functools
import math
import re

from ._units import math_verify_drops_units


def math_verify_verdict(answer: str, gold: str, alarm_s: int, rel_tol: float = 0.0) -> bool:
    """Grade with math-verify, in this process.  Main thread only when `alarm_s` > 0.

    Both sides are parsed as ``\\boxed{...}`` so that math-verify reads them as the
    final answers they are, whatever else they contain; the answer as LaTeX only, or
    math-verify's fallback when a lone number is all the math it holds.  A short word at
    the end is dropped as a unit only where it is one (`math_verify_drops_units`: not the
    ``t`` of ``1 + 2t``).
    Complex numbers written with ``i`` are compared as complex numbers
    (`_complex_equal`).  With `rel_tol` > 0, two constant real values that close are
    equal too, and so are two tuples, sets, matrices or intervals whose entries are
    (`_numerically_close`).
    """
    from math_verify import parse, verify
    from math_verify.parser import ExprExtractionConfig

    limit = alarm_s if alarm_s > 0 else None
    gold_parsed = parse(
        "\\boxed{" + gold + "}", [_latex(math_verify_drops_units(gold)), ExprExtractionConfig()], parsing_timeout=limit
    )
    answer_parsed = parse("\\boxed{" + answer + "}", [_latex(math_verify_drops_units(answer))], parsing_timeout=limit)
    if answer_parsed and isinstance(answer_parsed[0], str) and _LONE_NUMBER.fullmatch(_PROSE.sub(" ", answer)):
        # No LaTeX reading, and the answer's one number is all its math ("I think 7.",
        # "-> 7"): math-verify's fallback, which reads a box's last number, reads it right.
        answer_parsed = parse("\\boxed{" + answer + "}", [_latex(True), ExprExtractionConfig()], parsing_timeout=limit)
    if not (gold_parsed and answer_parsed) or isinstance(answer_parsed[0], str):
        return False  # no reading of the whole answer: `3x + 7 +` is no 7
    if verify(gold_parsed, answer_parsed, timeout_seconds=limit):
        return not _values_differ(answer_parsed[0], gold_parsed[0])
    exact_gold, exact_answer = _exact_exponents(gold_parsed[0]), _exact_exponents(answer_parsed[0])
    changed = exact_gold is not gold_parsed[0] or exact_answer is not answer_parsed[0]
    if changed and verify([exact_gold], [exact_answer], timeout_seconds=limit):
        return True
    if _complex_equal(answer_parsed[0], gold_parsed[0]):
        return True
    return rel_tol > 0 and _numerically_close(answer_parsed[0], gold_parsed[0], rel_tol)


@functools.cache
def _latex(units: bool) -> object:
    """math-verify's default LaTeX reading, with or without its unit words dropped."""
    from latex2sympy2_extended.math_normalization import NormalizationConfig
    from math_verify.parser import LatexExtractionConfig

    config = NormalizationConfig(
        basic_latex=True, units=units, malformed_operators=True, nits=True, boxed="all", equations=False
    )
    return LatexExtractionConfig(normalization_config=config)


_PROSE = re.compile(r"\b(?:[a-zA-Z]{2,}|I|[a-z]\.[a-z]\.)(?![\w^_])|[\s,.;:!?'\"`*()\[\]<>→=-]+")
"""Words and punctuation around a value in prose, which hold no math of their own."""
_LONE_NUMBER = re.compile(r"\s*\d+(?:\.\d+)?\s*")


def _values_differ(answer: object, gold: object) -> bool:
    """Two exact real constants (no decimal in either) whose values differ, which
    math-verify calls equal: it compares ``(a - b).evalf(chop=True)`` with 0, and chop
    zeroes any difference under about 1e-15 (``\\frac{1}{2^{98}}`` is
    ``-\\frac{1}{2^{98}}`` to it) and one lost between two huge terms
    (``\\frac{5^{2024}}{\\binom{4048}{2024}} - 2`` is ``\\frac{4^{2024}}{...} - 2``).
    Each side evaluated alone to 30 digits tells them apart, entry by entry in a tuple,
    matrix or interval; a decimal's rounding (``0.333333`` for ``\\frac13``) is
    math-verify's to judge."""
    import sympy

    if isinstance(answer, sympy.Interval) and isinstance(gold, sympy.Interval):
        return _values_differ(answer.start, gold.start) or _values_differ(answer.end, gold.end)
    for kind in (sympy.Tuple, sympy.MatrixBase):
        if isinstance(answer, kind) and isinstance(gold, kind):
            same_shape = getattr(answer, "shape", len(answer)) == getattr(gold, "shape", len(gold))
            return same_shape and any(_values_differ(a, g) for a, g in zip(answer, gold, strict=True))
    if not all(isinstance(v, sympy.Expr) and v.is_number and not v.has(sympy.Float) for v in (answer, gold)):
        return False
    a, g = (sympy.N(v, _DIGITS) for v in (answer, gold))
    if not all(v.is_zero or (v.is_Float and v.is_finite and v._prec >= _DIGITS * 3) for v in (a, g)):
        return False  # complex, infinite, unevaluated, or a zero evalf could not settle
    return a != g and bool(abs(a - g) > sympy.Float(1e-20) * max(abs(a), abs(g)))


_DIGITS = 30


def _exact_exponents(parsed: object) -> object:
    """`parsed` with each decimal in an exponent made the exact fraction it is written
    as (``2^{1.5}`` is ``2^{3/2}``, ``2\\sqrt2``); `parsed` itself when it has none.
    math-verify keeps ``2**1.5`` unevaluated and refuses it."""
    import sympy

    if not isinstance(parsed, sympy.Basic):
        return parsed
    decimals = {f for power in parsed.atoms(sympy.Pow) for f in power.exp.atoms(sympy.Float)}
    if not decimals:
        return parsed
    return parsed.xreplace({f: sympy.Rational(str(f)) for f in decimals})


def _complex_equal(answer: object, gold: object) -> bool:
    """Two complex numbers written with ``i`` (the answer may use Python's ``j``), equal
    once it is the imaginary unit: ``i(2-i)`` is ``1+2i``, ``i^5`` is ``i``,
    ``e^{i\\pi/3}`` is ``\\frac12 + \\frac{\\sqrt3}{2} i``.  math-verify reads ``i`` as a
    variable and refuses them."""
    import sympy

    if not (isinstance(answer, sympy.Expr) and isinstance(gold, sympy.Expr)):
        return False
    gold_names = {s.name for s in gold.free_symbols}
    answer_names = {s.name for s in answer.free_symbols}
    if not gold_names <= {"i"} or not (answer_names <= {"i"} or answer_names == {"j"}) or not gold_names | answer_names:
        return False
    unit = {s: sympy.I for s in answer.free_symbols | gold.free_symbols}
    return bool(sympy.simplify(sympy.expand_complex(answer.subs(unit) - gold.subs(unit))) == 0)


def _numerically_close(answer: object, gold: object, rel_tol: float) -> bool:
    """Two parsed answers within `rel_tol` of each other: finite real constants (an
    integer gold must be met exactly; ``\\infty`` is no number here), or tuples and
    matrices entry by entry in order, sets in any order and intervals by their ends
    and openness, where an entry with no decimal in it must be exact; or two expressions
    in variables as functions (`_close_function`)."""
    import sympy

    if isinstance(answer, sympy.Interval) and isinstance(gold, sympy.Interval):
        if (answer.left_open, answer.right_open) != (gold.left_open, gold.right_open):
            return False
        return _entries_close([answer.start, answer.end], [gold.start, gold.end], rel_tol, ordered=True)
    for kind in (sympy.Tuple, sympy.MatrixBase, sympy.FiniteSet):
        if isinstance(answer, kind) and isinstance(gold, kind):
            if getattr(answer, "shape", None) != getattr(gold, "shape", None):
                return False
            ordered = kind is not sympy.FiniteSet
            return _entries_close(
                list(answer if ordered else answer.args), list(gold if ordered else gold.args), rel_tol, ordered=ordered
            )
    return _close_number(answer, gold, rel_tol) or _close_function(answer, gold, rel_tol)


_SAMPLES = (0.13, 0.29, 0.41, 0.57, 0.83)
"""Where two expressions are compared as functions: no special values (0, 1, integers
make coincidences), and small, so that ``e^{\\cosh(4x)}`` stays a number."""


def _close_function(answer: object, gold: object, rel_tol: float) -> bool:
    """Two expressions in the same (at most three) variables, one with a decimal
    constant, within `rel_tol` of each other at each sample point where both are
    defined, and defined at three at least: ``0.333333 + (-0.0185185)(x - 5)`` is
    ``\\frac{23 - x}{54}``, ``2.71828182845905^{\\cosh(4x)}`` is ``e^{\\cosh(4x)}``."""
    import sympy

    if not (isinstance(answer, sympy.Expr) and isinstance(gold, sympy.Expr)):
        return False
    symbols = sorted(gold.free_symbols, key=str)
    if not symbols or len(symbols) > 3 or answer.free_symbols != gold.free_symbols:
        return False
    if not (answer.has(sympy.Float) or gold.has(sympy.Float)):
        return False
    defined = 0
    for k in range(len(_SAMPLES)):
        # each variable its own value, so that `x - y` is not 0 everywhere
        point = {v: sympy.Float(_SAMPLES[(k + j) % len(_SAMPLES)]) for j, v in enumerate(symbols)}
        a, g = answer.evalf(30, subs=point), gold.evalf(30, subs=point)
        if not (a.is_number and g.is_number and a.is_finite and g.is_finite):
            continue
        if abs(a - g) > rel_tol * max(abs(a), abs(g)):
            return False
        defined += 1
    return defined >= 3


def _entries_close(answers: list, golds: list, rel_tol: float, *, ordered: bool) -> bool:
    if len(answers) != len(golds):
        return False
    if ordered:
        return all(_entry_close(a, g, rel_tol) for a, g in zip(answers, golds, strict=True))
    remaining = list(golds)
    for a in answers:
        match = next((i for i, g in enumerate(remaining) if _entry_close(a, g, rel_tol)), None)
        if match is None:
            return False
        del remaining[match]
    return True


def _entry_close(answer: object, gold: object, rel_tol: float) -> bool:
    """One entry of a tuple, set, matrix or interval: within `rel_tol` when either side
    was written as a decimal, else exactly equal."""
    import sympy

    if answer == gold:
        return True
    if not (isinstance(answer, sympy.Expr) and isinstance(gold, sympy.Expr)):
        return False
    if answer.has(sympy.Float) or gold.has(sympy.Float):
        return _close_number(answer, gold, rel_tol)
    return bool(sympy.simplify(answer - gold) == 0)


def _close_number(answer: object, gold: object, rel_tol: float) -> bool:
    import sympy

    if not all(isinstance(v, sympy.Expr) and v.is_number for v in (answer, gold)) or gold.is_integer:
        return False
    a, g = complex(answer.evalf(30)), complex(gold.evalf(30))
    if a.imag or g.imag or not (math.isfinite(a.real) and math.isfinite(g.real)):
        return False
    return abs(a.real - g.real) <= rel_tol * max(abs(a.real), abs(g.real))
