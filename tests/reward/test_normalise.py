"""The rule-based answer comparer: a table of known forms, and properties."""

from __future__ import annotations

import json
import time
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstar2_async.recipe import data_dir
from rstar2_async.reward import MAX_ANSWER_CHARS, answers_match, normalize_answer

DATA = data_dir()

SAME = [
    # numbers, fractions, mixed numbers
    ("0.5", "\\frac{1}{2}"),
    ("\\dfrac{14}{3}", "\\frac{14}{3}"),
    ("\\tfrac{14}{3}", "14/3"),
    ("\\frac43", "\\frac{4}{3}"),
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
    ("4210_{5}", "4210_5"),
    ("−3", "-3"),
    ("The end.", "The end"),
    # tuples, intervals, sets, lists, unions
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
]

DIFFERENT = [
    ("1", "2"),
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
    ("2x", "2"),
    ("2 \\text{ and } 3", "2"),
    ("\\text{A} \\text{ and } \\text{B}", "\\text{A} \\text{ and } \\text{C}"),
    ("2\\frac{5}{4}", "\\frac{13}{4}"),  # improper: a product, not a mixed number
    ("1/0", "2/0"),
    ("", ""),
    ("5", ""),
    ("\\frac{\\pi}{2}", "\\frac{\\pi}{3}"),
    ("9^{9^{9}}", "9^{9^{8}}"),
]


@pytest.mark.parametrize(("pred", "gold"), SAME)
def test_same_answers_match(pred: str, gold: str) -> None:
    assert answers_match(pred, gold)
    assert answers_match(gold, pred)


@pytest.mark.parametrize(("pred", "gold"), DIFFERENT)
def test_different_answers_do_not_match(pred: str, gold: str) -> None:
    assert not answers_match(pred, gold)
    assert not answers_match(gold, pred)


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
        assert not answers_match(f"{n:,}", str(m))
        assert not answers_match(str(n), f"\\text{{{m}}}")


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
