"""Real gold answers rewritten (``rstar2_async.testing``): MATH-500's golds in another
notation of their own value are paid in both modes, and with a value one step off in
neither.  No label is needed, so nothing here was written beside the grader's rules;
``benchmarks/grader_rewrites.py`` runs every gold of ../shared/data, math-verify beside."""

from __future__ import annotations

import json

import pytest

from rstar2_async.recipe import data_dir
from rstar2_async.reward import score
from rstar2_async.testing import (
    ANSWER_FORMATS,
    CHANGED_VALUE_REWRITES,
    GOLD_FORMATS,
    SAME_VALUE_REWRITES,
    changed_value_rewrites,
    same_value_rewrites,
)


def _golds(name: str) -> list[str]:
    return list(dict.fromkeys(str(json.loads(line)["answer"]) for line in (data_dir() / name).open()))


GOLDS = _golds("math500.jsonl")


def _wrong_verdicts(rewrites, right: float) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    wrong = []
    for gold in GOLDS:
        for _, answer in rewrites(gold):
            for fmt, write in ANSWER_FORMATS.items():
                reply = write(answer)
                for mode in ("strict", "lenient") if fmt == "boxed" else ("lenient",):
                    if score(reply, gold, mode=mode) != right:
                        wrong.append((gold, reply, mode))
    return wrong


@pytest.mark.slow
def test_every_notation_of_a_gold_is_paid() -> None:
    assert _wrong_verdicts(same_value_rewrites, 1.0) == []


@pytest.mark.slow
def test_no_value_one_step_off_is_paid() -> None:
    assert _wrong_verdicts(changed_value_rewrites, 0.0) == []


@pytest.mark.slow
def test_a_gold_written_as_data_sets_write_it_is_the_same_gold() -> None:
    """``$g$``, ``\\(g\\)``, ``\\[g\\]``, ``\\boxed{g}``: the gold's own box is paid against
    each, and a value one step off is not."""
    wrong = []
    for gold in GOLDS:
        changed = changed_value_rewrites(gold)[:1]
        for write in GOLD_FORMATS.values():
            for answer, right in [(gold, 1.0)] + [(value, 0.0) for _, value in changed]:
                for mode in ("strict", "lenient"):
                    if score(f"\\boxed{{{answer}}}", write(gold), mode=mode) != right:
                        wrong.append((write(gold), answer, mode))
    assert wrong == []


def test_each_rewrite_applies_to_real_golds() -> None:
    """A rewrite whose pattern stopped matching real golds would check nothing."""
    golds = GOLDS + _golds("train_math.jsonl")
    applied = {name for gold in golds for name, _ in same_value_rewrites(gold) + changed_value_rewrites(gold)}
    assert {*SAME_VALUE_REWRITES, *CHANGED_VALUE_REWRITES} - applied == set()


@pytest.mark.parametrize(
    ("gold", "expected"),
    [
        ("\\frac{3}{8}", {"decimal": "0.375", "slash_fraction": "3/8", "dfrac": "\\dfrac{3}{8}"}),
        ("-\\frac{1}{2}", {"sign_in_numerator": "\\frac{-1}{2}", "decimal": "-0.5", "short_fraction": "-\\frac12"}),
        (
            "10080",
            {"thousands_comma": "10,080", "thousands_braced_comma": "10{,}080", "approximately": "\\approx 10080"},
        ),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", {"no_left_right": "( 3, \\frac{\\pi}{2} )", "stated_value": None}),
        ("\\text{Evelyn}", {"mathrm_for_text": "\\mathrm{Evelyn}", "no_spaces": None}),
        ("x \\le 2", {"leq_geq": "x \\leq 2", "no_spaces": "x\\le2", "point_zero": None}),
        ("81, 256", {"no_spaces": None}),  # 81,256 would be one number
        ("1+\\sqrt{2}", {"swapped_sum": "\\sqrt{2} + 1", "explicit_product": None}),
        ("2\\sqrt{3}", {"explicit_product": "2 \\cdot \\sqrt{3}", "short_root": "2\\sqrt3"}),
        ("\\frac{\\sqrt{3}}{2}", {"frac_as_division": "(\\sqrt{3})/(2)"}),
        ("1\\frac{4}{5}", {"frac_as_division": None}),  # a mixed number
        ("\\frac{3}{7} i", {"frac_as_division": None}),  # a product, left to precedence as `(3)/(7) i`
        ("5000000", {"scientific": "5 \\times 10^{6}"}),
        ("\\frac{1}{8}", {"negative_power": "8^{-1}"}),
        ("30^\\circ", {"unicode_degree": "30°"}),
        ("(1,2)", {"spaced_tuple": "(1, 2)"}),
        ("\\frac{3}{4}", {"unreduced_fraction": "\\frac{6}{8}"}),
        ("\\sqrt[3]{5}", {"root_as_power": "5^{1/3}"}),
        ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", {"matrix_as_rows": "[[1, 2], [3, 4]]"}),
        ("2\\frac{1}{2}", {"unicode_fraction": "2½"}),
        ("x^2 + 10^{-6}", {"unicode_power": "x² + 10⁻⁶"}),
        ("2^{1/3}", {"unicode_power": None}),  # no fraction in superscripts
    ],
)
def test_same_value_rewrites(gold: str, expected: dict[str, str | None]) -> None:
    got = dict(same_value_rewrites(gold))
    assert {name: got.get(name) for name in expected} == expected


@pytest.mark.parametrize(
    ("gold", "expected"),
    [
        ("(-\\infty, 0]", {"other_bracket": None, "last_number_plus_one": "(-\\infty, 1]"}),
        ("[2, 5)", {"other_bracket": "(2, 5)", "first_number_plus_one": "[3, 5)"}),
        ("-1,3,3", {"one_item_fewer": None}),  # as a set of solutions it would not change
        ("1, 2, 3", {"one_item_fewer": "1, 2"}),
        ("15\\mbox{ cm}^2", {"last_number_plus_one": None}),  # the unit's number
        ("a_1 + 2", {"first_number_plus_one": None, "last_number_plus_one": "a_1 + 3"}),
        ("\\pm 3", {"negated": None}),
        ("0", {"negated": None}),
        ("4ab", {"other_variable": "4aq"}),
        ("x \\in [-2,7]", {"other_variable": None}),  # a relation names its variable at will
        ("\\frac{3}{4}", {"reciprocal": "\\frac{4}{3}"}),
        ("2\\sqrt{3}", {"root_dropped": "2(3)"}),
        ("3\\pi", {"e_for_pi": "3e"}),
        (
            "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
            {"transposed": "\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}"},
        ),
        ("0.375", {"last_decimal_digit": "0.376"}),
        ("66.450", {"last_decimal_digit": None}),  # within lenient mode's tolerance, a policy
        ("3+4i", {"imaginary_dropped": "3+4"}),
        ("y = 2x + 3", {"variable_named_other": "q = 2x + 3"}),
        ("5", {"variable_named_other": None}),
    ],
)
def test_changed_value_rewrites(gold: str, expected: dict[str, str | None]) -> None:
    got = dict(changed_value_rewrites(gold))
    assert {name: got.get(name) for name in expected} == expected
