"""Notations both checks read as LaTeX: math-verify, which cannot read them, and our
comparer (``_normalise``), which reads the same text after it.

Python's math (``2**(1/4)``, ``3*sqrt(5)``, ``comb(10, 3)``), roots written in Unicode
(``√13``), a letter set upright (``3\\mathrm{i}``), a fraction written short
(``\\frac\\pi 2``) and an empty root before its radicand (``\\sqrt{}{3}``).  Pure
functions, no evaluation.
"""

from __future__ import annotations

import re

__all__ = ["EMPTY_SQRT", "PYTHON_FUNCTIONS", "PYTHON_MODULES", "braced_fractions", "python_notation", "spelled_math"]

_FRAC_ARG = r"(\w|\\[a-zA-Z]+|\{[^{}]*\})"
_SHORT_FRACTION = re.compile(rf"\\([dt]?frac)\s*{_FRAC_ARG}\s*{_FRAC_ARG}")
"""A fraction with an argument unbraced (``\\frac12``, ``\\frac\\pi 2``), which math-verify
reads as ``\\frac{\\}{p}i 2``, that is 2."""
EMPTY_SQRT = re.compile(r"\\sqrt\{\}(?=\{)")
"""``\\sqrt{}{3}``: a root of nothing then its radicand, a typo some data sets' golds keep."""
_PYTHON_POWER = re.compile(r"(?<=[\w)\]}])\*\*(?=[\w(\[{+-])")
"""Python's power ``2**(1/4)`` between two operands (not markdown's ``**bold**``)."""
_LATEX_FUNCTIONS = "sqrt|exp|log|ln|(?:sin|cos|tan)h?|cot|sec|csc"
PYTHON_FUNCTIONS = f"{_LATEX_FUNCTIONS}|comb|binomial|factorial|Rational|Fraction"
"""Python's math functions read as LaTeX (`python_notation`), and so no prose."""
_PYTHON_NAME = re.compile(rf"(?<![a-zA-Z_\\])(?:(pi)(?!\w)|(?:{_LATEX_FUNCTIONS})(?=\())")  # `7pi`, `2sqrt(5)`
_PYTHON_SQRT = re.compile(r"\\sqrt\(([^()]*)\)")
_LATEX_NAME = {"log": "\\ln", "pi": "\\pi"}  # Python's log is the natural one
PYTHON_MODULES = "math|cmath|numpy|np|sympy|sp"
"""Modules whose names prefix Python's math functions (``math.sqrt``), no prose either."""
_MODULE = re.compile(rf"(?<![\w.])(?:{PYTHON_MODULES})\.(?=[a-zA-Z])")
_PAIR_CALL = re.compile(r"(?<![\w.])(comb|binomial|Rational|Fraction)\(\s*([^(),]+?)\s*,\s*([^(),]+?)\s*\)")
_ROMAN_LETTER = re.compile(r"\\mathrm\s*\{\s*([a-z])\s*\}")
"""``3\\mathrm{i}``, ``\\mathrm{e}^2``: a constant or variable set upright, as ISO writes
``i`` and ``e``; math-verify reads no ``\\mathrm{}`` but as text, and so ``3\\mathrm{i}`` as 3."""
_UNICODE_ROOT = re.compile(r"([√∛∜])\s*(?:\(([^()]*)\)|\{([^{}]*)\}|(\d+(?:\.\d+)?|[a-zA-Z]|\\pi(?![a-zA-Z])))")
_ROOT_INDEX = {"√": "", "∛": "[3]", "∜": "[4]"}
_VULGAR = {"½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5), "⅖": (2, 5), "⅗": (3, 5)}
_VULGAR |= {"⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅐": (1, 7), "⅛": (1, 8), "⅜": (3, 8), "⅝": (5, 8), "⅞": (7, 8)}
_VULGAR |= {"⅑": (1, 9), "⅒": (1, 10)}
_VULGAR_FRACTION = re.compile(f"[{''.join(_VULGAR)}]")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_POWER = re.compile("[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
_SCALES = {"hundred": 2, "thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_SCALE_HINT = re.compile(r"hundred|thousand|[mbr]illion|dozen", re.IGNORECASE)
_SCALED = re.compile(
    r"(?<![\w.])(?P<number>\d+(?:\.\d+)?)\s*(?P<text>\\(?:text|mbox|mathrm)\s*\{)?\s*"
    r"(?P<word>hundred|thousand|million|billion|trillion|dozen)s?\b(?(text)\s*(?P<close>\})?)",
    re.IGNORECASE,
)
_PERCENT_TEXT = re.compile(r"\\(?:text|mbox)\s*\{\s*(?:percent|per\s*cent|pct)\s*\}")
_FACTORIAL_CALL = re.compile(r"(?<![\w.])factorial\(\s*([^()]+?)\s*\)")


def python_notation(text: str) -> str:
    """`text` with Python's math written as LaTeX, which math-verify reads (golds and
    answers written as code): ``**`` as ``^`` (``2**(1/4)``); and, in text with no
    LaTeX command, ``pi``, ``sqrt(2)``, ``exp(2)``, ``log(2)`` as ``\\pi``, ``\\sqrt{2}``,
    ``\\exp(2)``, ``\\ln(2)`` (``2*pi``, ``(3*sqrt(5))/7``), ``comb(10, 3)`` as
    ``\\binom{10}{3}``, ``Rational(1, 3)`` as ``\\frac{1}{3}``, ``factorial(5)`` as
    ``5!``, with or without their module (``math.sqrt(2)``, ``np.pi``).  A percent
    written as a word in LaTeX text (``\\frac{1}{2}\\text{ percent}``) becomes ``\\%``,
    which math-verify reads (it reads the bare word, not the text command); a letter
    set upright (``\\mathrm{i}``) is the letter; a root in Unicode (``√13``) is LaTeX's;
    an empty root before its radicand (``\\sqrt{}{3}``) becomes the root of it and a
    fraction written short (``\\frac\\pi 2``) is braced, as `normalize_answer` reads
    them: math-verify, which settles what our comparer cannot, gets the same reading."""
    if "\\text" in text or "\\mbox" in text:
        text = _PERCENT_TEXT.sub(r"\\%", text)
    if "\\mathrm" in text:
        text = _ROMAN_LETTER.sub(r"\1", text)
    text = spelled_math(text)
    if "\\sqrt{}" in text:
        text = EMPTY_SQRT.sub(r"\\sqrt", text)
    if "frac" in text:
        text = braced_fractions(text)
    if "**" in text:
        text = _PYTHON_POWER.sub("^", text)
    if "\\" in text or ("(" not in text and "pi" not in text):
        return text
    text = _MODULE.sub("", text)
    text = _PAIR_CALL.sub(
        lambda m: ("\\binom" if m[1] in ("comb", "binomial") else "\\frac") + f"{{{m[2]}}}{{{m[3]}}}", text
    )
    text = _FACTORIAL_CALL.sub(
        lambda m: (m[1] if re.fullmatch(r"\w", m[1]) or m[1].isdigit() else f"({m[1]})") + "!", text
    )
    if _PYTHON_NAME.search(text):
        text = _PYTHON_NAME.sub(lambda m: _LATEX_NAME.get(m[0], "\\" + m[0]), text)
        for _ in range(4):  # inner first: `sqrt(sqrt(2))`
            text, n = _PYTHON_SQRT.subn(r"\\sqrt{\1}", text)
            if not n:
                break
    return text


def spelled_math(text: str) -> str:
    """`text` with math spelled in Unicode or in words written as LaTeX: roots (``√13``,
    ``3√(2x)``, ``∛5``), fractions (``2½`` is ``2\\frac{1}{2}``), powers (``10⁶`` is
    ``10^{6}``, ``cm²`` ``cm^{2}``) and a number's scale (``5 million`` is ``5 \\times
    10^{6}``, ``2 \\text{ dozen}`` is ``2 \\times 12``), which is no unit to drop."""
    if not text.isascii():
        text = _VULGAR_FRACTION.sub(lambda m: "\\frac{{{}}}{{{}}}".format(*_VULGAR[m[0]]), text)
        text = _POWER.sub(lambda m: f"^{{{m[0].translate(_SUPERSCRIPT)}}}", text)
    if any(c in text for c in _ROOT_INDEX):
        text = _UNICODE_ROOT.sub(
            lambda m: f"\\sqrt{_ROOT_INDEX[m[1]]}{{{next(g for g in m.groups()[1:] if g is not None)}}}", text
        )
    return _SCALED.sub(_scaled, text) if _SCALE_HINT.search(text) else text


def _scaled(m: re.Match[str]) -> str:
    word = m["word"].lower()
    number = f"{m['number']} \\times " + ("12" if word == "dozen" else f"10^{{{_SCALES[word]}}}")
    return f"{number} {m['text']}" if m["text"] and not m["close"] else number  # `\text{ million dollars}`


def braced_fractions(s: str) -> str:
    return _SHORT_FRACTION.sub(lambda m: f"\\{m[1]}{_braced(m[2])}{_braced(m[3])}", s)


def _braced(arg: str) -> str:
    return arg if arg.startswith("{") else "{" + arg + "}"
