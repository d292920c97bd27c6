"""Another notation of a gold answer's own value (`SAME_VALUE_REWRITES`): a right grader
pays each.  Only notations, no policy: units, currency, choice letters and reordered
lists are a grader's choices, not equivalences."""

from __future__ import annotations

import re
from collections.abc import Callable

Rewrite = Callable[[str], "str | None"]
"""A gold answer in, the rewritten answer out; None where the rewrite does not apply."""

_VULGAR = {"1/2": "½", "1/3": "⅓", "2/3": "⅔", "1/4": "¼", "3/4": "¾", "1/6": "⅙", "5/6": "⅚", "3/8": "⅜", "5/8": "⅝"}
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_FRACTION = re.compile(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}")
_INTEGER = re.compile(r"-?\d+")


def _replaced(old: str, new: str) -> Rewrite:
    def rewrite(gold: str) -> str | None:
        return gold.replace(old, new) if old in gold else None

    return rewrite


def _substituted(pattern: str, replacement: str | Callable[[re.Match[str]], str]) -> Rewrite:
    def rewrite(gold: str) -> str | None:
        new = re.sub(pattern, replacement, gold)
        return new if new != gold else None

    return rewrite


def _whole(pattern: str | re.Pattern[str], rewritten: Callable[[re.Match[str]], str]) -> Rewrite:
    """A gold that is all of `pattern`, `rewritten` from its match."""
    compiled = re.compile(pattern)

    def rewrite(gold: str) -> str | None:
        m = compiled.fullmatch(gold.strip())
        return rewritten(m) if m else None

    return rewrite


def _unit_replaced(table: dict[str, str]) -> Rewrite:
    """The gold's unit of measure written in words (in ``\\text{}`` or ``\\mbox{}``), or
    as ``^\\circ``, replaced by its entry of `table`."""
    words = "|".join(re.escape(w) for w in table if w != "^\\circ")
    unit = re.compile(rf"(\\(?:text|mbox)\{{\s*(?:square\s+|cubic\s+)?)({words})(?=\s*\}})|(\^\{{?\\circ\}}?)")

    def rewrite(gold: str) -> str | None:
        m = unit.search(gold)
        if not m:
            return None
        new = f"{m[1]}{table[m[2]]}" if m[2] else table.get("^\\circ")
        return None if new is None else f"{gold[: m.start()]}{new}{gold[m.end() :]}"

    return rewrite


def _display_fraction(gold: str) -> str | None:
    return re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", gold).replace("\\frac", "\\dfrac") if "frac" in gold else None


def _sign_in_numerator(gold: str) -> str | None:
    m = _FRACTION.fullmatch(gold.strip())
    return f"\\frac{{-{m[2]}}}{{{m[3]}}}" if m and m[1] else None


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


def _spaced_tuple(gold: str) -> str | None:
    """``(1,2)`` as ``(1, 2)``: in brackets a comma is a separator, never a thousands one."""
    g = gold.strip()
    if not re.fullmatch(r"[(\[][^()\[\]{}]*,[^()\[\]{}]*[)\]]", g) or ", " in g:
        return None
    return g.replace(",", ", ")


def _matrix_rows(gold: str) -> str | None:
    """A matrix written as its list of rows: ``[[1, 2], [3, 4]]``."""
    m = re.fullmatch(r"\\begin\{[pb]matrix\}(.*)\\end\{[pb]matrix\}", gold.strip(), re.DOTALL)
    if not m or re.search(r"[a-zA-Z\\](?![\\])", m[1].replace("\\\\", "")):
        return None  # only numbers: `\frac` in a cell would need its own care
    rows = [[cell.strip() for cell in row.split("&")] for row in m[1].split("\\\\")]
    return "[" + ", ".join("[" + ", ".join(row) + "]" for row in rows if any(row)) + "]"


def _unicode_root(gold: str) -> str | None:
    """``3\\sqrt{13}`` as ``3√13``, ``\\sqrt{2x}`` as ``√(2x)``."""
    new = re.sub(r"\\sqrt\{(\d+|[a-zA-Z])\}", r"√\1", gold)
    new = re.sub(r"\\sqrt\{([^{}\\]+)\}", r"√(\1)", new)
    return new if new != gold else None


def _python_root(gold: str) -> str | None:
    """``1 + 2\\sqrt{3}`` as ``1+2sqrt(3)``, as a reply written in plain text has it."""
    if not re.fullmatch(r"[-+\d\s]*\\sqrt\{\d+\}[-+\d\s]*", gold.strip()):
        return None
    return re.sub(r"\\sqrt\{(\d+)\}", r"sqrt(\1)", gold).replace(" ", "")


SAME_VALUE_REWRITES: dict[str, Rewrite] = {
    "dfrac": _display_fraction,
    "slash_fraction": _whole(_FRACTION, lambda m: f"{m[1]}{m[2]}/{m[3]}"),
    "short_fraction": _substituted(r"\\frac\{(\d)\}\{(\d)\}", r"\\frac\1\2"),  # `\frac12`
    "short_root": _substituted(r"\\sqrt\{(\d)\}", r"\\sqrt\1"),
    "sign_in_numerator": _sign_in_numerator,
    "decimal": _decimal,
    "point_zero": _whole(_INTEGER, lambda m: f"{m[0]}.0"),
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
    "approximately": _whole(_INTEGER, lambda m: f"\\approx {m[0]}"),  # a rounding that is no rounding
    "frac_as_division": _divided,
    "swapped_sum": _swapped_sum,
    "explicit_product": _substituted(
        r"(?<![\d.])(\d+)\s*(\\(?:sqrt|pi)(?![a-zA-Z]))", r"\1 \\cdot \2"
    ),  # `2 \cdot \sqrt{3}`
    "scientific": _whole(r"(-?[1-9]\d*?)(0{3,})", lambda m: f"{m[1]} \\times 10^{{{len(m[2])}}}"),  # `5 \times 10^{6}`
    "negative_power": _whole(r"\\[dt]?frac\{1\}\{([2-9]|[1-9]\d+)\}", lambda m: f"{m[1]}^{{-1}}"),  # `8^{-1}`
    "trailing_zero": _whole(r"-?\d+\.\d+", lambda m: f"{m[0]}0"),
    "unicode_degree": lambda g: _replaced("^\\circ", "°")(g) or _replaced("^{\\circ}", "°")(g),
    "bmatrix": _replaced("pmatrix", "bmatrix"),
    "spaced_tuple": _spaced_tuple,
    "unreduced_fraction": _whole(  # `\frac{3}{4}` as `\frac{6}{8}`
        _FRACTION, lambda m: f"{m[1]}\\frac{{{2 * int(m[2])}}}{{{2 * int(m[3])}}}"
    ),
    "product_reordered": _whole(  # `2\sqrt{3}` as `\sqrt{3} \cdot 2`, `3\pi` as `\pi \cdot 3`
        r"(-?)(\d+)\s*(\\sqrt\{[^{}]+\}|\\pi)", lambda m: f"{m[1]}{m[3]} \\cdot {m[2]}"
    ),
    "root_as_power": _whole(r"\\sqrt(?:\[(\d)\])?\{(\d+)\}", lambda m: f"{m[2]}^{{1/{m[1] or 2}}}"),  # `5^{1/3}`
    "matrix_as_rows": _matrix_rows,
    "bold": lambda g: f"\\mathbf{{{g}}}",
    "unicode_root": _unicode_root,
    "unicode_minus": _substituted(r"(?<![\\a-zA-Z])-(?=\d)", "−"),
    "roman_imaginary": _substituted(r"(?<=\d)i\b", r"\\mathrm{i}"),
    "python_root": _python_root,
    "python_pi": _whole(r"(-?\d*)\s*\\pi", lambda m: f"{m[1]}pi"),  # `7pi`
    "unsimplified_root": _whole(  # `2\sqrt{3}` as `\sqrt{12}`
        r"(\d+)\s*\\sqrt\{(\d+)\}", lambda m: f"\\sqrt{{{int(m[1]) ** 2 * int(m[2])}}}"
    ),
    "bare_division": _whole(  # `\pi/2`, `\sqrt{3}/2`: one term over a number
        r"(-?)\\[dt]?frac\{(\d*\\pi|\d*\\sqrt\{\d+\}|\d+)\}\{(\d+)\}", lambda m: f"{m[1]}{m[2]}/{m[3]}"
    ),
    "tfrac": _substituted(r"\\d?frac(?![a-zA-Z])", r"\\tfrac"),
    "plus_infinity": _substituted(r"(?<![-+])\\infty", r"+\\infty"),
    "percent_sign": _replaced("\\%", "%"),
    "unit_spelled": _unit_replaced(  # `8\text{ cm}` as `8\text{ centimeters}`, `90^\circ` as `90 \text{ degrees}`
        {"cm": "centimeters", "inches": "in", "feet": "ft", "miles": "mi", "pounds": "lbs", "hours": "hrs"}
        | {"days": "day", "dollars": "dollar", "cents": "cent", "degrees": "deg", "^\\circ": " \\text{ degrees}"}
    ),
    "scale_word": _whole(  # `5000000` as `5 million`
        r"(-?[1-9]\d*?)(0{6}|0{3})", lambda m: f"{m[1]} {'million' if len(m[2]) == 6 else 'thousand'}"
    ),
    "unicode_fraction": _substituted(  # `\frac{3}{4}` as `¾`
        r"\\[dt]?frac\{([1-7])\}\{([2-8])\}", lambda m: _VULGAR.get(f"{m[1]}/{m[2]}", m[0])
    ),
    "unicode_power": _substituted(  # `10^{6}` as `10⁶`, `x^2` as `x²`
        r"(?<=[\w)])\^(?:\{(-?\d+)\}|(\d))", lambda m: (m[1] or m[2]).translate(_SUPERSCRIPT)
    ),
}
