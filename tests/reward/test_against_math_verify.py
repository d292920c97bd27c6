"""Lenient mode against math-verify, the reference the grader must never lose to: answers
written the ways models write them, each with a right value and with a distractor in its
place.  Wherever math-verify's own ``verify(parse(gold), parse(response))`` takes the right
value, lenient mode does too, and lenient mode never takes the distractor.

The check set (``test_grader_checks.py``) holds other projects' cases; this table crosses
answer formats with value spellings, which is where an extraction rule silently misses
(``1 000`` in prose, a ``Result:`` label, the first of two numbers after ``Answer:``)."""

from __future__ import annotations

import itertools

from math_verify import parse, verify

from rstar2_async.reward import score

FORMATS = [
    "Answer: {v}", "Answer: {v} dollars", "answer: {v}.", "The answer is {v}", "The answer is: {v}",
    "Final answer: {v}", "final answer is: {v}", "**Final Answer:** {v}", "**Final Answer**: {v}",
    "So, the answer is ${v}$.", "The total cost is ${v}.", "Thus the result equals {v}.", "{v} is the answer.",
    "Step 1: add.\nStep 2: multiply.\nAnswer: {v}\n", "Answer: {v} apples in {d} baskets",
    "Answer: there are {v} apples in {d} baskets.", "The answer is {v} (in {d} steps).", "Therefore, $x = {v}$.",
    "Hence the answer is $\\boxed{{{v}}}$", "We find that $n = {v}$", "The answer:\n{v}", "Answer:\n\n{v}",
    "ANSWER: {v}", "Final Answer\n{v}", "### Answer\n{v}", "The final answer is $\\mathbf{{{v}}}$.",
    "The answer is **{v}**.", "Answer: **{v}**", "The answer is \\( {v} \\).", "The answer is \\[ {v} \\]",
    "So she has {v} left.", "In total, {v}.", "The answer would be {v}.", "The number of ways is {v}.",
    "Result: {v}", "Solution: {v}", "Therefore {v}.", "The value is {v}", "= {v}", "Total = {v}",
    "After {d} days, the answer is {v}.", "It takes {d} hours, so the answer is {v}.", "Answer: It is {v}.",
    "答案：{v}", "答案是 {v}。", "Respuesta: {v}", "Antwort: {v}", "Réponse : {v}", "Ответ: {v}", "答え：{v}",
    "정답: {v}", "Risposta: {v}", "Resposta: {v}",
    # a JSON reply, as evaluations that ask for one get it (ZeroEval's `{"reasoning": ..., "answer": ...}`)
    '{{"reasoning": "There are {d} cases.", "answer": "{v}"}}',
    'Here is the solution:\n\n{{\n    "reasoning": "It takes {d} steps, so the answer is {d}.",\n    "answer": "{v}"\n}}',
]  # fmt: skip
# (as written, gold, a distractor)
VALUES = [
    ("42", "42", "7"), ("3.5", "3.5", "2"), ("1,234", "1234", "5"), ("\\frac{3}{4}", "\\frac34", "2"),
    ("-7", "-7", "3"), ("25\\%", "25\\%", "4"), ("0.25", "\\frac14", "9"), ("12", "12", "30"),
    ("1 000", "1000", "6"), ("2^{10}", "1024", "3"), ("\\sqrt{2}", "\\sqrt{2}", "\\sqrt{3}"),
    ("3\\sqrt{2}", "3\\sqrt2", "2\\sqrt{3}"), ("-\\frac{1}{2}", "-\\frac12", "\\frac12"),
    ("(1, 2)", "(1,2)", "(2, 1)"), ("30^\\circ", "30", "60"), ("1/3", "\\frac{1}{3}", "1/4"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", "\\frac{1}{2}"), ("\\dfrac{7}{2}", "3.5", "\\dfrac{5}{2}"),
    ("12.0", "12", "13.0"),
]  # fmt: skip


def _math_verify(response: str, gold: str) -> bool:
    parsed_gold, parsed = parse(gold), parse(response)
    return bool(parsed_gold and parsed and verify(parsed_gold, parsed))


def test_lenient_takes_every_value_math_verify_takes_and_no_distractor() -> None:
    lost, fooled = [], []
    for form, (value, gold, distractor) in itertools.product(FORMATS, VALUES):
        right = form.format(v=value, d=distractor)
        if _math_verify(right, gold) and score(right, gold, mode="lenient") != 1.0:
            lost.append((right, gold))
        wrong = form.format(v=distractor, d=value)
        if score(wrong, gold, mode="lenient") != 0.0:
            fooled.append((wrong, gold))
    assert (lost, fooled) == ([], [])


def test_a_box_math_verify_reads_only_in_part_is_not_paid() -> None:
    """math-verify cannot read these boxes as LaTeX, and its fallback then reads their
    last number: ``\\boxed{3x + 7 +}`` equals a gold of 7 to it.  Neither mode pays them;
    a sentence's stop after the answer, or an ``=`` before it, is no part of it."""
    assert verify(parse("$7$"), parse("\\boxed{3x + 7 +}")) and verify(parse("$2$"), parse("\\boxed{(1, 2).}"))
    tails = ["+", "&", "\\]", "\\)", "!", " \\approx", "*", ".", ",", ";", ":"]
    for expr, tail in itertools.product(["3x + 7", "x^2 + 4x + 7", "(x, 7)", "\\{x, 7\\}", "[1, 7]"], tails):
        answer = f"\\boxed{{{expr}{tail}}}"
        assert score(answer, "7", mode="strict") == score(answer, "7", mode="lenient") == 0.0, answer
    for answer in ("\\boxed{7.}", "\\boxed{= 7}", "\\boxed{(1, 7).}", "\\boxed{x = 7;}", "\\boxed{#### 7}"):
        gold = "(1, 7)" if "(" in answer else "7"
        assert score(answer, gold, mode="strict") == score(answer, gold, mode="lenient") == 1.0, answer


def test_exact_constants_math_verify_calls_equal_are_told_apart() -> None:
    """math-verify compares ``(a - b).evalf(chop=True)`` with 0: chop zeroes a difference
    under about 1e-15, and one lost between two huge terms, so it pays these wrong answers
    (in strict mode, a reward).  Each side evaluated alone tells them apart."""
    wrong = [
        ("-\\frac{1}{2^{98}}", "\\frac{1}{2^{98}}"),
        ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}"),
        ("\\dfrac{5^{2024}}{\\binom{4048}{2024}}-2", "\\dfrac{4^{2024}}{\\binom{4048}{2024}}-2"),
        ("(-2^{-98}, 1)", "(2^{-98}, 1)"),
        ("[0, -2^{-98}]", "[0, 2^{-98}]"),
    ]
    right = [
        ("2^{-98}", "\\frac{1}{2^{98}}"),
        ("\\frac{2^{4048}}{\\binom{4048}{2024}}-2", "\\dfrac{4^{2024}}{\\binom{4048}{2024}}-2"),
        ("\\log_2 8 - 3", "0"),  # zero, which evalf cannot show but the difference can
        ("\\sqrt{2+\\sqrt3}", "\\frac{\\sqrt6+\\sqrt2}{2}"),
        ("0.333333", "\\frac13"),  # a decimal's rounding stays math-verify's to judge
    ]
    assert all(verify(parse(f"${g}$"), parse(f"${a}$")) for a, g in wrong[:3])
    for answers, expected in ((wrong, 0.0), (right, 1.0)):
        for answer, gold in answers:
            reply = f"\\boxed{{{answer}}}"
            assert score(reply, gold, mode="strict") == score(reply, gold, mode="lenient") == expected, answer
