"""The readers that build the check set (data/check_readers.py, data/check_asserts.py)
on each test shape they claim to read: a wrong reader would put cases with the wrong
label, or gold and prediction swapped, into data/grader_checks.jsonl, and the check
set's own test holds only the file it wrote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "data"))  # the build script's flat imports

from check_readers import read
from check_rows import Row, Shape

TESTS = """
class TestReward(unittest.TestCase):
    def setUp(self):
        self.custom = Reward(tolerance=1e-3)

    def test_tags(self):
        self.assertEqual(self.custom("prompt", "<answer>42</answer>", "42"), 1.0)
        self.assertEqual(self.custom("prompt", "<answer>4</answer>", "42"), 0.1)


def test_direct():
    assert grade("1/2", "0.5") is True
    assert not grade("3", "4")


def test_kept():
    ok, extracted = grade("Answer: 42", "42")
    assert ok is True


@pytest.mark.parametrize("given,gt", [("x+1", "1+x")])
def test_body(given, gt):
    assert grade(given, gt) is True
"""


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_asserted_calls_read_unittest_assertions_and_the_grader_made_in_set_up() -> None:
    lost: list[str] = []
    rows = list(read("asserted_calls", TESTS, lost, Shape(call=("custom", 2, 1))))
    line = _line(TESTS, "<answer>42</answer>")
    assert rows == [Row("42", "<answer>42</answer>", True, line, "test_tags", "Reward(tolerance=0.001), 'prompt'")]
    assert lost == [f"test_tags:{line + 1}"]  # 0.1, partial credit, is no label


def test_asserted_calls_read_direct_negated_and_kept_verdicts() -> None:
    rows = list(read("asserted_calls", TESTS, [], Shape(call=("grade", 1, 0))))
    assert [(r.gold, r.prediction, r.label, r.test) for r in rows] == [
        ("0.5", "1/2", True, "test_direct"),
        ("4", "3", False, "test_direct"),
        ("42", "Answer: 42", True, "test_kept"),
    ]
    assert rows[2].line == _line(TESTS, "ok, extracted")


def test_parametrized_tests_take_the_verdict_their_body_asserts() -> None:
    shape = Shape(gold=("gt",), pred=("given",), verdict="grade(given, gt)")
    rows = list(read("parametrize", TESTS, [], shape))
    assert [(r.gold, r.prediction, r.label) for r in rows] == [("1+x", "x+1", True)]


def test_a_notebooks_cells_are_read_on_the_lines_of_the_notebook_file() -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ['test_eq(ev.eq("1", "1.0"), True)\n']},  # shown, not run
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "source": [
                'test_eq(ev.eq("1", "1.0"), True)\n',
                "%load_ext autoreload\n",
                'test_eq(ev.eq("1", "2"), False)',
            ],
        },
        {"cell_type": "code", "metadata": {}, "outputs": [], "source": ["def broken(:\n"]},
    ]
    text = json.dumps({"cells": cells}, indent=1)
    lost: list[str] = []
    rows = list(read("notebook", text, lost, Shape(call=("eq", 0, 1))))
    assert [(r.gold, r.prediction, r.label, r.test) for r in rows] == [
        ("1", "1.0", True, "cell 1"),
        ("1", "2", False, "cell 1"),
    ]
    code = text.index('"code"')  # the markdown cell above shows the first line too
    lines = [text.count("\n", 0, text.index(json.dumps(c), code)) + 1 for c in cells[1]["source"]]
    assert [r.line for r in rows] == [lines[0], lines[2]]
    assert lost == ["cell 2"]


ABSL = """
class GradeTest(parameterized.TestCase):
    @parameterized.named_parameters(
        dict(testcase_name="overline", given_answer="2.33", ground_truth=r"2.\\overline{3}", expected=True),
        dict(testcase_name="partial", given_answer="[1,2]", ground_truth="1,2]", expected=False),
        dict(testcase_name="unlabelled", given_answer="1", ground_truth="1"),
    )
    def test_grade(self, given_answer, ground_truth, expected):
        self.assertEqual(grade(given_answer, ground_truth), expected)
"""


def test_absl_named_parameters_are_rows_and_their_names_no_settings() -> None:
    lost: list[str] = []
    rows = list(read("parametrize", ABSL, lost, Shape(gold=("ground_truth",), pred=("given_answer",))))
    assert rows == [
        Row(r"2.\overline{3}", "2.33", True, _line(ABSL, "overline"), "test_grade", ""),
        Row("1,2]", "[1,2]", False, _line(ABSL, "partial"), "test_grade", ""),
    ]
    assert lost == []  # a row without a label is no case (the body asserts none)


BATCH = """
def test_rewards():
    completion = [[{"content": r"\\boxed{3}"}], [{"content": "7"}]]
    solution = ["3", "6"]
    rewards = accuracy_reward(completion, solution)
    assert rewards[0] == 1.0
    assert rewards[1] == 0.0
    assert rewards[1] is None
"""


def test_batches_read_plain_asserts_by_index() -> None:
    lost: list[str] = []
    shape = Shape(gold=("solution",), pred=("completion",))
    rows = list(read("batches", BATCH, lost, shape))
    assert [(r.gold, r.prediction, r.label, r.line) for r in rows] == [
        ("3", r"\boxed{3}", True, _line(BATCH, "rewards[0] ==")),
        ("6", "7", False, _line(BATCH, "rewards[1] ==")),
    ]
    assert lost == [f"test_rewards:{_line(BATCH, 'is None')}"]  # None is no verdict


NEGATED = """
@pytest.mark.parametrize(("pred", "gold"), [("x^2", "x^3"), ("2.3", "2.2892")])
def test_substitution_does_not_credit_wrong_answers(pred, gold):
    assert not math_equal(pred, gold)


@pytest.mark.parametrize(("pred", "gold"), [("7 \\\\sin x", "7*sin(x)")])
def test_latex_matches_sympy(pred, gold):
    assert math_equal(pred, gold)
"""


def test_columns_named_in_a_tuple_and_a_negated_body_verdict() -> None:
    rows = list(read("parametrize", NEGATED, [], Shape(verdict="math_equal(pred, gold)")))
    assert [(r.gold, r.prediction, r.label) for r in rows] == [
        ("x^3", "x^2", False),  # `not math_equal(...)` ends like the verdict but denies it
        ("2.2892", "2.3", False),
        ("7*sin(x)", "7 \\sin x", True),
    ]


REWARDS = """
@pytest.mark.parametrize(
    "output, ground_truth, expected",
    [("\\\\boxed{42}", "42", 1.0), ("\\\\boxed{43}", "42", -1.0), ("\\\\boxed{41}", "42", 0.0)],
)
def test_compute_score(output, ground_truth, expected):
    assert env.step(output)["reward"] == expected
"""


def test_a_source_that_rewards_a_wrong_answer_with_minus_one() -> None:
    lost: list[str] = []
    shape = Shape(gold=("ground_truth",), pred=("output",), wrong=-1)
    rows = list(read("parametrize", REWARDS, lost, shape))
    assert [(r.prediction, r.label) for r in rows] == [("\\boxed{42}", True), ("\\boxed{43}", False)]
    assert lost == [f"test_compute_score:{_line(REWARDS, '41')}"]  # 0 is no verdict of that grader
    plain = list(read("parametrize", REWARDS, [], Shape(gold=("ground_truth",), pred=("output",))))
    assert [r.label for r in plain] == [True, False]  # -1 is no verdict where a wrong answer scores 0
