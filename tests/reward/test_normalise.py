"""The rule-based answer comparer: a table of known forms, and properties."""

from __future__ import annotations

import json
import time
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstar2_async.recipe import data_dir
from rstar2_async.reward import LENIENT_REL_TOL, MAX_ANSWER_CHARS, answers_match, normalize_answer
from rstar2_async.reward._units import stated_unit

DATA = data_dir()

SAME = [
    # numbers, fractions, mixed numbers
    ("0.5", "\\frac{1}{2}"),
    ("\\dfrac{14}{3}", "\\frac{14}{3}"),
    ("\\tfrac{14}{3}", "14/3"),
    ("\\frac43", "\\frac{4}{3}"),
    ("1 1/2", "\\frac{3}{2}"),  # a mixed number written with a space (MARIO_EVAL's test)
    ("-2 3/4", "-2.75"),
    # scientific notation
    ("2.5 \\times 10^{-3}", "0.0025"),
    ("3 \\cdot 10^{5}", "300000"),
    ("1.5\\times10^3", "1500"),
    # every command escaped twice, an environment's rows too
    (
        "\\\\begin{pmatrix} 1 \\\\\\\\ \\\\frac{1}{2} \\\\end{pmatrix}",
        "\\begin{pmatrix} 1 \\\\ \\frac{1}{2} \\end{pmatrix}",
    ),
    ("\\frac 59", "5/9"),
    ("\\frac9{19}", "\\frac{9}{19}"),
    ("-\\frac{3}{8}", "\\frac{-3}{8}"),
    ("-0.375", "-\\frac{3}{8}"),
    (".0000672", "0.0000672"),
    ("1.8", "1\\frac{4}{5}"),
    ("137.5", "137 \\frac{1}{2}"),
    ("5.", "5"),
    ("+7", "7"),
    ("007", "7"),
    ("\\boxed{\\boxed{5}}", "5"),
    ("{5}", "5"),
    # thousands separators
    ("1,000", "1000"),
    ("10080", "10,\\!080"),
    ("11111111100", "11,\\! 111,\\! 111,\\! 100"),
    ("1{,}000", "1000"),
    ("1\\,000", "1000"),
    ("58500", "58,500"),
    ("1.000.000", "1000000"),  # points between groups of three, twice: no decimal
    # text, units, money, degrees, percentages
    ("Evelyn", "\\text{Evelyn}"),
    ("C", "\\text{(C)}"),
    ("(C)", "\\textbf{C}"),
    ("5.4", "5.4 \\text{ cents}"),
    ("864", "864 \\mbox{ inches}^2"),
    ("15", "15\\mbox{ cm}^2"),
    ("12", "12 cm"),
    ("5", "5 square units"),
    ("\\frac{270}{7}", "\\frac{270}7\\text{ degrees}"),
    ("32348", "\\$32,\\!348"),
    ("18.90", "\\$18.90"),
    ("90", "90^\\circ"),
    ("90", "90^{\\circ}"),
    ("90°", "90"),
    ("10", "10\\%"),
    ("10%", "10"),
    # layout
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("(3, \\frac\\pi2)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\displaystyle \\frac{1}{2}", "$\\frac12$"),
    ("x=5", "5"),
    ("y = 2x + 3", "2x+3"),
    ("x \\in [-2,7]", "[-2, 7]"),
    ("\\theta = 30", "30"),
    ("\\sqrt2", "\\sqrt{2}"),
    ("11\\sqrt2", "11 \\sqrt{2}"),
    (r"\frac{3\sqrt{}{3}}{2}", r"\frac{3\sqrt{3}}{2}"),  # an empty root before its radicand
    ("4210_{5}", "4210_5"),
    ("−3", "-3"),
    ("The end.", "The end"),
    ("€1,000.99", "1000.99"),  # a currency sign before the number
    ("£12", "12"),
    ("72 Mb/h", "72"),  # claude-3-haiku on GSM8K (ZeroEval); a unit with a slash
    ("5 m/s", "5"),
    ("60km/h", "60"),
    ("\\text{answer: 12}", "12"),  # Phi-3.5-mini on MATH (ZeroEval): $$\boxed{\text{answer: 12}}$$
    ("\\textbf{Answer: 12}", "12"),
    ("1:30 PM", "1:30"),  # a time written without am/pm may be either half of the day
    # a time of day on the 24-hour clock (Qwen2.5-Math's harness refused the first)
    ("4:30 \\text{ p.m.}", "\\text{4:30 p.m.}"),
    ("8:34 P.M.", "20:34"),
    ("2pm", "14:00:00"),
    ("12 a.m.", "00:00"),
    ("8:34", "20:34"),
    # tuples, intervals, sets, lists, unions
    (r"\langle 1, -2, 3 \rangle", "(1,-2,3)"),  # a vector in angle brackets
    (r"\text{all real numbers}", r"\mathbb{R}"),
    (r"\textbf{(C) } 12", "C"),  # a choice with its value is the choice
    (r"\text{(D)}\ 12", r"\text{(D)}"),
    (r"12^{\text{th}}", "12"),  # an ordinal
    ("2^{nd}", "2"),
    ("2 = x", "2"),  # the variable on the right
    ("-3 = y_1", "-3"),
    ("(1, 2)", "(1,2)"),
    ("(0.5, -13)", "\\left( \\frac{3}{6}, -13 \\right)"),
    ("(3,4]", "(3, 4]"),
    ("(-\\infty, 0]", "(-\\infty,0]"),
    ("(2, +\\infty)", "(2,\\infty)"),
    ("(2, ∞)", "(2,\\infty)"),
    ("1,-2", "-2, 1"),
    ("3, 5, 7", "7,3,5"),
    ("\\{1\\pm\\sqrt{5},-2\\}", "\\{-2, 1\\pm\\sqrt5\\}"),
    ("(0,9) \\cup (9,36)", "(9, 36) \\cup (0, 9)"),
    ("\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]", "[\\frac{\\pi^{2}}{8},\\frac{5\\pi^2}{4}]"),
    ("\\begin{pmatrix} -1/3 \\\\ 2/3 \\end{pmatrix}", "\\begin{pmatrix}-1/3\\\\2/3\\end{pmatrix}"),
    # matrices in any environment, cell by cell
    (r"\begin{bmatrix} -1 & 0 \\ 0 & -1 \end{bmatrix}", r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}"),
    (r"\left(\begin{array}{cc} 1 & 2 \\ 3 & 4 \end{array}\right)", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"\left[\begin{matrix} 1 & 2 \end{matrix}\right]", r"\begin{pmatrix} 1 & 2 \end{pmatrix}"),
    (r"\begin{pmatrix} -\frac13 \\ 0.5 \\ \end{pmatrix}", r"\begin{pmatrix} -1/3 \\ 1/2 \end{pmatrix}"),
    # a leading "Answer:"
    (r"\text{Answer: } 42", "42"),
    ("Answer: 42", "42"),
    ("**Answer:** 42", "42"),
    (r"\textbf{Final answer:} \frac12", "0.5"),
    ("The answer is 7", "7"),
    # relations
    (r"x \neq 5", "x != 5"),
    (r"x \ne 5", "x ≠ 5"),
    (r"x \geq 2", "x ≥ 2"),
    (r"a \leqslant b", "a <= b"),
    (r"x \gt 2", "x > 2"),
    # intervals and sets in other notations
    (r"]2, \infty[", r"(2,\infty)"),
    ("[3,4[", "[3,4)"),
    ("]3,4]", "(3,4]"),
    (r"\mathbb{R}", r"(-\infty,\infty)"),
    (r"\emptyset", r"\varnothing"),
    (r"\{\}", "∅"),
    (r"\lbrace 1, 2\rbrace", r"\{1,2\}"),
    (r"\{3,5,7\}", "3, 5, 7"),
    ("x > 2", r"(2,\infty)"),
    ("2 < x", r"(2,\infty)"),
    (r"x \geq 5", r"[5,\infty)"),
    (r"x \le 0", r"(-\infty, 0]"),
    (r"-\sqrt3 < x < \sqrt3", r"(-\sqrt{3}, \sqrt{3})"),
    (r"3 > x \geq 1", "[1,3)"),
    ("|x| > 8", r"(-\infty,-8)\cup(8,\infty)"),
    (r"\left| x \right| \le 3", "[-3,3]"),
    (r"\lvert x \rvert < 3", "(-3,3)"),
    ("|x - 3| < 2", "(1,5)"),
    (r"|x + 1| \ge 2", r"(-\infty,-3]\cup[1,\infty)"),
    (r"\left|x - \frac12\right| \le \frac32", "[-1,2]"),
    (r"x < -8 \text{ or } x > 8", "|x| > 8"),
    (r"\{x \mid x > 2\}", r"(2,\infty)"),
    (r"\{x \in \mathbb{R} : x \le 2\}", r"x \le 2"),
    (r"\text{no solution}", r"\emptyset"),
    (r"\text{No real roots}", r"\varnothing"),
    (r"x<2 \text{ or } x>3", r"(-\infty, 2) \cup (3, \infty)"),
    (r"(-\infty,2)∪(3,\infty)", r"(-\infty, 2) \cup (3, \infty)"),
    (r"\{1\pm\sqrt{5},-2\}", r"\{-2, 1+\sqrt{5}, 1-\sqrt{5}\}"),
    (r"1 \pm \sqrt{19}", r"1+\sqrt{19}, 1-\sqrt{19}"),
    # thousands, degrees, units, repeating decimals
    ("14{,}916", "14916"),
    (r"14\ 916", "14916"),
    (r"90{}^\circ", "90"),
    (r"\text{90 degrees}", "90"),
    (r"\cos(6 \text{ degrees})\sin(12^\circ)", r"\cos(6^\circ)\sin(12^\circ)"),  # the word, not only at the end
    (r"60 \text{ degrees}, 120^\circ", r"60^\circ, 120^\circ"),
    (r"(6,235 \text{ degrees})", r"(6,235^\circ)"),
    (r"\text{5.4 cents}", "5.4"),
    ("5¢", r"5 \text{ cents}"),  # a cent sign is a currency sign too
    (r"5 \text{ m/s}", "5"),
    (r"0.\overline{3}", r"\frac13"),
    (r"0.1\overline{6}", "1/6"),
    (r"-1.\overline{142857}", "-8/7"),
    ("f(x) = 2x+3", "2x+3"),
    # LaTeX escaped once more (through JSON or a Python string)
    (r"-2 \\le x \\le 7", r"x \in [-2,7]"),
    (r"\\frac{1}{2}", "0.5"),
]

DIFFERENT = [
    ("1.000", "1000"),  # one point may be a decimal one
    ("1.000.00", "100000"),
    ("5 x/y", "5"),  # no unit: math
    ("2:00 am", "14:00"),  # a time whose half of the day is known
    ("08:34", "20:34"),  # a leading zero: the 24-hour clock
    ("1:30 a.m.", "1:30 p.m."),
    ("12:00", "1:00"),
    ("2:00 pm", "2"),  # a time is no number, but for lenient mode's hour (below)
    ("1", "2"),
    ("1 1/2", "11/2"),  # the space was once dropped, making 11/2 of it
    ("2.5 \\times 10^{-3}", "0.025"),
    ("\\cos(x)=\\frac{1}{2}", "\\sin(x)=\\frac{1}{2}"),  # a function is no variable to drop
    ("0.333", "\\frac{1}{3}"),
    ("(1,2)", "(2,1)"),  # tuples are ordered
    ("(3,4]", "(3,4)"),  # intervals keep their brackets
    ("[3,4]", "(3,4)"),
    ("(1,2)", "1,2"),  # a tuple is not a list
    ("(1,234)", "1234"),  # thousands separators never break a tuple
    ("1, 234", "1234"),  # ... nor a list written with spaces
    ("1,2", "12"),
    ("1,2,3", "1,2"),
    ("10 \\pi", "10"),  # pi is no unit
    ("2 \\text{ or more}", "2"),  # words that bound or take back a value are no unit
    ("(A), (B)", "A"),  # two choices are no choice
    ("(A)(B)", "A"),
    ("a + b = c", "a + b"),
    (r"x^{\text{th}}", "x"),
    ("2 or more", "2"),
    ("2 \\text{ is not the answer}", "2"),
    ("\\text{at least } 2", "2"),
    ("2x", "2"),
    ("2 \\text{ and } 3", "2"),
    ("\\text{A} \\text{ and } \\text{B}", "\\text{A} \\text{ and } \\text{C}"),
    ("2\\frac{5}{4}", "\\frac{13}{4}"),  # improper: a product, not a mixed number
    ("1/0", "2/0"),
    ("", ""),
    ("5", ""),
    ("\\frac{\\pi}{2}", "\\frac{\\pi}{3}"),
    ("9^{9^{9}}", "9^{9^{8}}"),
    # near misses of the equivalences above
    (r"\begin{bmatrix} -1 & 0 \\ 0 & 1 \end{bmatrix}", r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}"),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\begin{pmatrix} 1 & 2 & 3 & 4 \end{pmatrix}"),  # shape
    (r"\begin{vmatrix} 1 & 2 \\ 3 & 4 \end{vmatrix}", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"\text{Answer: } 17", "7"),
    (r"x \neq 5", "5"),
    (r"x \neq 5", "x = 5"),
    (r"x \geq 2", "x > 2"),
    ("x > 2", r"[2,\infty)"),
    (r"x \geq 2", r"(2,\infty)"),
    ("x < 0", r"(-\infty, 0]"),
    (r"3 \leq x < 4", "(3,4]"),
    (r"x < 2 \text{ or } x \geq 3", r"(-\infty, 2) \cup (3, \infty)"),
    ("x < 2 \text{ or } y > 3", r"(-\infty, 2) \cup (3, \infty)"),  # two variables
    ("a < b", "c < b"),  # two inequalities name the same variable
    ("y > 2", "x > 2"),
    ("|x| > 8", r"(-\infty,-8]\cup[8,\infty)"),
    ("|x| < 8", r"(-\infty,-8)\cup(8,\infty)"),
    ("|x - 3| < 2", "(1,6)"),
    ("|x - a| < 2", "(1,5)"),
    (r"\{y \mid x > 2\}", r"(2,\infty)"),
    (r"\text{no solution}", "0"),
    ("]2,3[", "[2,3]"),
    (r"\{0\}", r"\emptyset"),
    (r"\mathbb{R}", r"(0,\infty)"),
    ("3, 5", r"\{3, 5, 7\}"),
    (r"1 \pm \sqrt{19}", r"1+\sqrt{19}"),
    (r"0.\overline{3}", "0.3"),
    (r"0.\overline{3}", "0.333"),
    (r"\text{5.4 cents}", "54"),
    # in a matrix `\\` is a row break, also before a letter
    (r"\begin{pmatrix} a \\b \end{pmatrix}", r"\begin{pmatrix} a & b \end{pmatrix}"),
]


@pytest.mark.parametrize(("pred", "gold"), SAME)
def test_same_answers_match(pred: str, gold: str) -> None:
    assert answers_match(pred, gold)
    assert answers_match(gold, pred)


@pytest.mark.parametrize(("pred", "gold"), DIFFERENT)
def test_different_answers_do_not_match(pred: str, gold: str) -> None:
    assert not answers_match(pred, gold)
    assert not answers_match(gold, pred)


@pytest.mark.parametrize(
    ("pred", "gold", "lenient"),
    [
        ("3.14159", "3.1416", True),  # SkyThought's math_equal cases
        ("2", "2.0001", True),
        ("(0.6, 2.6667]", "(\\frac{3}{5}, \\frac{8}{3}]", True),  # item by item
        ("0.3333", "\\frac13", True),
        ("0.333", "\\frac13", False),  # 1e-3 off
        ("\\frac{3333}{10000}", "\\frac13", False),  # a fraction is no approximation
        ("4.67", "\\frac{14}{3}", False),
        ("100000.5", "100000", False),  # an integer gold needs the integer
        ("100001", "100000", False),
        ("1.0001", "1.0", True),  # a gold written with a point was rounded
        ("-2.0001", "2.0001", False),
        ("3.1416, 2", "2.0001, 3.14159", True),  # unordered lists too
    ],
)
def test_lenient_numbers_within_the_fields_tolerance(pred: str, gold: str, lenient: bool) -> None:
    assert answers_match(pred, gold, mode="lenient") is lenient
    assert not answers_match(pred, gold)  # strict, the default, is exact


@pytest.mark.parametrize(
    ("pred", "gold", "lenient"),
    [
        # a number spelt out, as Qwen2.5-Math's grader reads it (word2number)
        ("five", "5", True),
        ("\\text{Twelve}", "12", True),
        ("twenty-one", "21", True),
        ("7", "\\text{seven}", True),
        ("infinity", "\\infty", True),
        ("-infinity", "-\\infty", True),
        ("fives", "5", False),
        ("five", "6", False),
        ("twenty one", "20", False),
        # e-notation
        ("1.5e3", "1500", True),
        ("2E-3", "\\frac{1}{500}", True),
        ("1.5e3", "150", False),
        ("2e", "2", False),  # 2e is 2 times e
        # a vector written as a tuple or as a one-column (one-row) matrix
        ("(1, 2, 3)", "\\begin{pmatrix} 1 \\\\ 2 \\\\ 3 \\end{pmatrix}", True),
        ("\\begin{bmatrix} 1 & -2 \\end{bmatrix}", "(1, -2)", True),
        ("(1, 3, 2)", "\\begin{pmatrix} 1 \\\\ 2 \\\\ 3 \\end{pmatrix}", False),  # in order
        ("(1, 2)", "\\begin{pmatrix} 1 \\\\ 2 \\\\ 3 \\end{pmatrix}", False),
        ("[1, 2]", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),  # brackets too, as math-verify reads them
        ("[2, 1]", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", False),
        ("(1, 2, 3, 4)", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", False),  # nor a 2x2 matrix
        # a time on the hour and the bare hour a data set gives for it (GSM8K's gold 2)
        ("2:00 pm", "2", True),
        ("\\text{2 p.m.}", "14", True),
        ("2:00 am", "14", False),
        ("2:30 pm", "2", False),
        ("3:00 pm", "2", False),
    ],
)
def test_lenient_reads_numbers_and_vectors_as_written(pred: str, gold: str, lenient: bool) -> None:
    assert answers_match(pred, gold, mode="lenient") is lenient
    assert not answers_match(pred, gold)  # strict reads only what is written


@given(st.fractions(min_value=Fraction(-(10**6)), max_value=Fraction(10**6)).filter(lambda q: q.denominator > 1))
def test_lenient_tolerance_is_relative_to_the_gold(q: Fraction) -> None:
    def decimal(x: Fraction) -> str:  # 30 significant digits, written out
        with localcontext() as context:
            context.prec = 30
            return format(Decimal(x.numerator) / Decimal(x.denominator), "f")

    inside, outside = q * (1 + LENIENT_REL_TOL / 2), q * (1 + LENIENT_REL_TOL * 3)
    assert answers_match(decimal(inside), str(q), mode="lenient")
    assert not answers_match(decimal(outside), str(q), mode="lenient")
    assert not answers_match(decimal(inside), str(q))  # strict
    assert not answers_match(f"{inside.numerator}/{inside.denominator}", str(q), mode="lenient")  # no decimal


def test_canonical_forms() -> None:
    assert normalize_answer("\\left( 3, \\dfrac{\\pi}{2} \\right)") == "(3,\\frac{\\pi}{2})"
    assert normalize_answer("\\$32,\\!348") == "32348"
    assert normalize_answer("\\text{(C)}") == "C"
    assert normalize_answer("x \\in [-2,7]") == "[-2,7]"


@pytest.mark.parametrize("dataset", ["math500", "aime24", "aime25", "hmmt_feb2024", "hmmt_feb2025", "gsm8k_test"])
def test_every_gold_answer_matches_itself(dataset: str) -> None:
    golds = [json.loads(line)["answer"] for line in (DATA / f"{dataset}.jsonl").open()]
    assert [g for g in golds if not answers_match(g, g)] == []


def test_bounded_cost_on_hostile_input() -> None:
    hostile = [
        "(" * MAX_ANSWER_CHARS,
        "{" * (MAX_ANSWER_CHARS // 2) + "}" * (MAX_ANSWER_CHARS // 2),
        "1," * (MAX_ANSWER_CHARS // 2),
        " " * (MAX_ANSWER_CHARS - 2) + "\\text{a}",
        "9" * MAX_ANSWER_CHARS,
        "\\frac{" * 300,
    ]
    start = time.perf_counter()
    for h in hostile:
        answers_match(h, h + "1")
        answers_match(h, "1")
    assert time.perf_counter() - start < 2.0
    assert not answers_match("1" * (MAX_ANSWER_CHARS + 1), "1" * (MAX_ANSWER_CHARS + 1))


integers = st.integers(min_value=-(10**12), max_value=10**12)


@given(integers)
def test_integer_in_any_dress_matches(n: int) -> None:
    for dressed in (f"{n:,}", f"\\text{{{n}}}", f"{n}.", f"{n}.0", f"{n} \\text{{ units}}", f"x = {n}", f"${n}$"):
        assert answers_match(dressed, str(n)), dressed


@given(integers, integers)
def test_different_integers_never_match(n: int, m: int) -> None:
    if n != m:
        for mode in ("strict", "lenient"):  # lenient's tolerance never reaches an integer gold
            assert not answers_match(f"{n:,}", str(m), mode=mode)
            assert not answers_match(str(n), f"\\text{{{m}}}", mode=mode)
            assert not answers_match(f"{n}.0", str(m), mode=mode)


_SMALL = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]
_SMALL += ["twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_DECADES = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _spelt(n: int) -> str:
    """0 to 99 in English words (`twenty-one`), spelt here apart from the grader's own table."""
    if n < 20:
        return _SMALL[n]
    return _DECADES[n // 10] + ("" if n % 10 == 0 else "-" + _SMALL[n % 10])


@given(st.integers(min_value=0, max_value=99), st.integers(min_value=-5, max_value=120))
def test_a_number_spelt_out_is_its_value_in_lenient_mode_only(n: int, m: int) -> None:
    word = _spelt(n)
    assert answers_match(word, str(n), mode="lenient")
    assert answers_match(f"\\text{{{word.capitalize()}}}", str(n), mode="lenient")
    assert not answers_match(word, str(n))  # strict
    assert answers_match(word, str(m), mode="lenient") is (n == m)


@given(st.fractions(max_denominator=10**6))
def test_fraction_forms_match(q: Fraction) -> None:
    sign = "-" if q < 0 else ""
    a, b = abs(q.numerator), q.denominator
    for written in (f"{sign}\\frac{{{a}}}{{{b}}}", f"{sign}\\dfrac{{{a}}}{{{b}}}", f"{q.numerator}/{b}"):
        assert answers_match(written, str(q)), written
    if q != 0:
        assert not answers_match(f"{sign}\\frac{{{a + 1}}}{{{b}}}", str(q))


@given(st.lists(st.integers(-1000, 1000), min_size=2, max_size=6), st.randoms())
def test_lists_are_unordered_and_tuples_ordered(items: list[int], rnd) -> None:
    shuffled = items[:]
    rnd.shuffle(shuffled)
    as_list = ", ".join(map(str, items))
    assert answers_match(", ".join(map(str, shuffled)), as_list)
    assert answers_match(f"\\{{{','.join(map(str, shuffled))}\\}}", f"\\{{{as_list}\\}}")
    tuple_ = f"({as_list})"
    assert answers_match(f"({', '.join(map(str, shuffled))})", tuple_) == (shuffled == items)


@given(st.text(max_size=60), st.text(max_size=60))
def test_never_raises(a: str, b: str) -> None:
    assert answers_match(a, b) in (True, False)
    assert answers_match(a, a) == bool(normalize_answer(a))


@pytest.mark.parametrize(
    ("answer", "unit"),
    [
        ("90^\\circ", "degree"),
        ("90°", "degree"),
        ("\\frac{270}7\\text{ degrees}", "degree"),
        ("90 \\text{ rad}", "radian"),
        ("864 \\mbox{ inches}^2", "in^2"),
        ("32\\text{ square cm}", "cm^2"),
        ("5225 \\text{ cubic inches}", "in^3"),
        ("164 \\pi \\mbox{ square feet}", "ft^2"),
        ("480 + 480\\sqrt{3}\\text{ feet}", "ft"),
        ("3\\,\\text{m}", "m"),
        ("60 \\text{km/h}", "km/h"),
        ("1 \\text{ hr}", "h"),
        ("\\$18.90", "dollar"),
        ("-\\$5", "dollar"),
        ("5¢", "cent"),
        ("1005_8", "base 8"),
        ("2A_{16}", "base 16"),
        ("a_1", None),
        ("5 ms", None),  # no metre in milliseconds
        ("20 \\text{ sq units}", None),  # no unit of measure
        ("240\\text{ ways.}", None),
        ("12 apples", None),
        ("25^\\circ C", None),  # a temperature: a degree of another kind
        ("4ab", None),
        ("5", None),
    ],
)
def test_stated_unit(answer: str, unit: str | None) -> None:
    assert stated_unit(answer) == unit
