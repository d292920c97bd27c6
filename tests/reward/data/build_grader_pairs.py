"""Writes grader_pairs.jsonl: labelled (gold, response) pairs for the grader.

Run from the repository root: ``python tests/reward/data/build_grader_pairs.py``.

Every label is decided here, by construction or by hand, never by running a grader:

- the gold answers of MATH-500, AIME 2024/2025, HMMT February 2024/2025 and GSM8K
  (``../shared/data``), each written the way models write a final answer (boxed in an
  ``<answer>`` block, "The answer is $G$.", ``**Answer:**``, ``#### N``, a display
  block, ``\\dfrac`` for ``\\frac``, ...): equal by construction, since the answer
  written is the gold answer;
- integer gold answers paired with a different integer (``n + d``, ``d != 0``) in
  adversarial settings: the gold appears earlier in the text, after "not", in a box
  outside the answer block, as a prefix of the answer; unequal by construction;
- hand-written pairs for each equivalence of issue 15 and their near misses, each
  with a note saying why;
- the distinct gold answers of the competition sets once more, in the shapes reasoning
  models' responses take (each family's thinking tags, chat tokens kept or skipped),
  equal by construction; or, for every third integer gold, the gold boxed only while
  thinking and another answer after it, or a response cut off while thinking: unequal;
- the distinct gold answers of MATH-500 once more, alternately kept and taken back in
  other languages' words ("nicht W, sondern G", "W ではなく G"), or after a bound or
  a question: equal, or unequal, by construction.

``expected`` maps each grading mode the case applies to onto the right verdict.
``adversarial`` marks a wrong answer a careless extraction would accept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[2].parent / "shared" / "data"
BOTH_TRUE = {"strict": True, "lenient": True}
BOTH_FALSE = {"strict": False, "lenient": False}
LENIENT_ONLY = {"strict": False, "lenient": True}


def golds(name: str) -> list[str]:
    return [str(json.loads(line)["answer"]) for line in (DATA / f"{name}.jsonl").open()]


def boxed(g: str) -> str:
    return f"Let me compute this carefully.\n<answer>The final answer is \\boxed{{{g}}}.</answer>"


# --- gold answers in the ways models write them -----------------------------------------

# A non-integer gold G, written as a model would; each keeps G's value, so each is equal.
LATEX_FORMS = [
    ("boxed in the answer block", lambda g: boxed(g), BOTH_TRUE),
    ("free text: 'the answer is $G$'", lambda g: f"Putting it together, the answer is ${g}$.", LENIENT_ONLY),
    ("free text: Final Answer heading, display math", lambda g: f"**Final Answer**\n\n\\[ {g} \\]", LENIENT_ONLY),
    ("free text: Answer: line without dollars", lambda g: f"We simplify and check.\n\nAnswer: {g}", LENIENT_ONLY),
    ("free text: last inline \\( \\) span, no anchor", lambda g: f"Hence we obtain \\({g}\\).", LENIENT_ONLY),
    ("boxed, \\frac written \\dfrac", lambda g: boxed(g.replace("\\frac", "\\dfrac")), BOTH_TRUE),
    ("boxed, no \\left/\\right", lambda g: boxed(g.replace("\\left", "").replace("\\right", "")), BOTH_TRUE),
    ("free text: **Answer:** $G$", lambda g: f"So that is it.\n\n**Answer:** ${g}$", LENIENT_ONLY),
]

# An integer gold N, written as a model would (equal), or a different integer W in a
# setting that tempts a lenient extraction (unequal).
INT_FORMS = [
    ("boxed in the answer block", lambda n, w: boxed(n), BOTH_TRUE, False),
    (
        "free text: 'The answer is N.'",
        lambda n, w: f"Adding these up gives the total.\nThe answer is {n}.",
        LENIENT_ONLY,
        False,
    ),
    ("free text: GSM8K '#### N'", lambda n, w: f"She has {w} - 1 = ... let me redo it.\n#### {n}", LENIENT_ONLY, False),
    (
        "free text: '$N$ ways' at the end",
        lambda n, w: f"Each case was counted once, so there are ${n}$ ways.",
        LENIENT_ONLY,
        False,
    ),
    (
        "adversarial: gold first, then the final answer W",
        lambda n, w: f"At first I got {n}, but that double counts. The answer is {w}.",
        BOTH_FALSE,
        True,
    ),
    ("adversarial: 'the answer is not N'", lambda n, w: f"The answer is not {n}. It is {w}.", BOTH_FALSE, True),
    (
        "adversarial: boxed gold outside, W boxed in the answer block",
        lambda n, w: f"Maybe \\boxed{{{n}}}? No.\n<answer>\\boxed{{{w}}}</answer>",
        BOTH_FALSE,
        True,
    ),
    (
        "adversarial: $x = N$ rejected, $x = W$ kept",
        lambda n, w: f"Trying $x = {n}$ gives a contradiction, so $x = {w}$.",
        BOTH_FALSE,
        True,
    ),
    (
        "free text: **Answer:** N",
        lambda n, w: f"Checking the arithmetic once more.\n\n**Answer:** {n}",
        LENIENT_ONLY,
        False,
    ),
    (
        "adversarial: boxed W, text mentions gold after",
        lambda n, w: f"<answer>\\boxed{{{w}}}</answer> (I briefly considered {n}.)",
        BOTH_FALSE,
        True,
    ),
    ("adversarial: boxed wrong integer", lambda n, w: boxed(w), BOTH_FALSE, True),
    (
        "adversarial: gold as a prefix, 'the final answer is N0'",
        lambda n, w: f"So the final answer is {n}{'1' if n == '0' else '0'}.",
        BOTH_FALSE,
        True,
    ),
    (
        "free text: 'the final answer is N' then a check",
        lambda n, w: f"Therefore, the final answer is {n}. Check: {w} is too big.",
        LENIENT_ONLY,
        False,
    ),
    (
        "adversarial: problem number restated, no answer",
        lambda n, w: f"We need to find how many of the {n} items remain... Let me think about {w} cases.",
        BOTH_FALSE,
        True,
    ),
]


def gold_cases() -> list[dict]:
    cases = []
    seen: set[str] = set()
    sets = ["math500", "aime24", "aime25", "hmmt_feb2024", "hmmt_feb2025", "gsm8k_test"]
    counter = 0
    for name in sets:
        answers = golds(name)
        if name == "gsm8k_test":
            answers = answers[:60]
        ints = 0
        for g in answers:
            if g in seen:
                continue
            seen.add(g)
            if re.fullmatch(r"-?\d+", g):
                if name == "math500" and ints >= 60:
                    continue
                ints += 1
                n = int(g)
                w = n + (7 if counter % 2 else -3) if n > 10 else n + 2
                note, form, expected, adversarial = INT_FORMS[counter % len(INT_FORMS)]
                response = form(str(n), str(w))
            else:
                note, form, expected = LATEX_FORMS[counter % len(LATEX_FORMS)]
                response, adversarial = form(g), False
            counter += 1
            cases.append(
                {
                    "gold": g,
                    "response": response,
                    "expected": expected,
                    "note": f"{name}: {note}",
                    "adversarial": adversarial,
                }
            )
    return cases


# --- hand-written: each equivalence of issue 15 and its near misses -------------------------

B = boxed
T2, F2, L = BOTH_TRUE, BOTH_FALSE, LENIENT_ONLY
ADV = True  # a wrong answer a careless grader would accept
M2 = r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}"
V3 = r"\begin{pmatrix} -1/3 \\ 2/3 \\ 5/3 \end{pmatrix}"
UNION = r"(-\infty, 2) \cup (3, \infty)"

HAND: list[tuple[str, str, dict[str, bool], str, bool]] = [
    # matrices in any environment, compared cell by cell
    (M2, B(r"\begin{bmatrix} -1 & 0 \\ 0 & -1 \end{bmatrix}"), T2, "matrix: bmatrix for pmatrix", False),
    (
        M2,
        B(r"\left(\begin{array}{cc} -1 & 0 \\ 0 & -1 \end{array}\right)"),
        T2,
        "matrix: array in \\left( \\right)",
        False,
    ),
    (M2, B(r"\left[\begin{matrix} -1 & 0 \\ 0 & -1 \end{matrix}\right]"), T2, "matrix: matrix in brackets", False),
    (M2, B(r"\begin{pmatrix}-1&0\\0&-1\\\end{pmatrix}"), T2, "matrix: no spaces, trailing \\\\", False),
    (M2, B(r"\begin{bmatrix} -1 & 0 \\ 0 & 1 \end{bmatrix}"), F2, "matrix: one entry differs", ADV),
    (M2, B(r"\begin{bmatrix} -1 & 0 & 0 \\ 0 & -1 & 0 \end{bmatrix}"), F2, "matrix: other shape", ADV),
    (M2, B(r"\begin{bmatrix} 0 & -1 \\ -1 & 0 \end{bmatrix}"), F2, "matrix: entries moved", ADV),
    (
        V3,
        B(r"\begin{bmatrix} -\frac{1}{3} \\ \frac{2}{3} \\ \frac{5}{3} \end{bmatrix}"),
        T2,
        "vector: bmatrix with \\frac",
        False,
    ),
    (V3, B(r"\begin{pmatrix} -\dfrac13 \\ \dfrac23 \\ \dfrac53 \end{pmatrix}"), T2, "vector: \\dfrac13", False),
    (V3, B(r"\begin{pmatrix} 1/3 \\ 2/3 \\ 5/3 \end{pmatrix}"), F2, "vector: sign of one entry", ADV),
    (V3, B(r"\begin{pmatrix} -1/3 \\ 5/3 \\ 2/3 \end{pmatrix}"), F2, "vector: entries reordered", ADV),
    (
        r"\begin{pmatrix} -2 \\ -14 \\ -7 \end{pmatrix}",
        B(r"\left[ \begin{array}{c} -2 \\ -14 \\ -7 \end{array} \right]"),
        T2,
        "vector: array column",
        False,
    ),
    (
        r"\begin{pmatrix} -2 \\ -14 \\ -7 \end{pmatrix}",
        r"So the vector is $\begin{bmatrix} -2 \\ -14 \\ -7 \end{bmatrix}$.",
        L,
        "vector in free text",
        False,
    ),
    (
        r"\begin{pmatrix} 16/49 \\ 48/49 \\ 24/49 \end{pmatrix}",
        B(r"\begin{pmatrix} \frac{16}{49} \\ \frac{48}{49} \\ \frac{24}{49} \end{pmatrix}"),
        T2,
        "vector: a/b as \\frac",
        False,
    ),
    (
        r"\begin{pmatrix} 16/49 \\ 48/49 \\ 24/49 \end{pmatrix}",
        B(r"\begin{pmatrix} 16/49 \\ 48/49 \\ 25/49 \end{pmatrix}"),
        F2,
        "vector: last entry off by 1/49",
        ADV,
    ),
    (
        r"\begin{pmatrix} 1/5 \\ -18/5 \end{pmatrix}",
        B(r"\begin{pmatrix} 0.2 \\ -3.6 \end{pmatrix}"),
        T2,
        "vector: decimals",
        False,
    ),
    (
        r"\begin{pmatrix} 2 & 1 \\ 1 & 3 \end{pmatrix}",
        B(r"\begin{vmatrix} 2 & 1 \\ 1 & 3 \end{vmatrix}"),
        F2,
        "vmatrix is a determinant (5), not the matrix",
        ADV,
    ),
    # a leading "Answer:"
    ("42", B(r"\text{Answer: } 42"), T2, "Answer: inside the box", False),
    ("42", B("Answer: 42"), T2, "Answer: inside the box, no \\text", False),
    (r"\frac{1}{2}", B(r"\textbf{Final answer:} \frac12"), T2, "Final answer: inside the box", False),
    ("7", B(r"\text{Answer: } 17"), F2, "Answer: 17 is not 7", ADV),
    ("14", "We count the pairs.\n\nAnswer: 14", L, "free text Answer: line", False),
    ("14", "**Answer:** 14 apples", L, "free text **Answer:** with a unit", False),
    ("3", "Answer: 13", F2, "Answer: 13 is not 3", ADV),
    ("5", "Final answer: x = 5", L, "Final answer: x = 5", False),
    ("5", "Final Answer: The final answer is $5$. I hope it is correct.", L, "Minerva's format", False),
    ("5", "Final Answer: The final answer is $25$. I hope it is correct.", F2, "Minerva's format, wrong", ADV),
    # relations
    (r"x \neq 5", B("x != 5"), T2, "\\neq as !=", False),
    ("x != 5", B(r"x \ne 5"), T2, "\\ne as !=", False),
    (r"x \neq 5", B("x ≠ 5"), T2, "unicode ≠", False),
    (r"x \neq 5", B(r"x \neq -5"), F2, "other value", ADV),
    (r"x \neq 5", B("5"), F2, "5 is what x is not", ADV),
    (r"x \neq 5", B("x = 5"), F2, "= is not !=", ADV),
    (r"x \geq 2", B(r"x \ge 2"), T2, "\\ge as \\geq", False),
    (r"x \geq 2", B("x ≥ 2"), T2, "unicode ≥", False),
    (r"x \geq 2", B(r"x \le 2"), F2, "\\le is not \\geq", ADV),
    (r"x \geq 2", B("x > 2"), F2, "> is not >=", ADV),
    # intervals and sets in other notations
    (r"(2,\infty)", B(r"]2, \infty["), T2, "French open interval", False),
    (r"(2,\infty)", B("x > 2"), T2, "inequality for an interval", False),
    (r"(2,\infty)", B(r"x \geq 2"), F2, "closed end", ADV),
    (r"(2,\infty)", B(r"[2,\infty)"), F2, "closed bracket", ADV),
    (r"(2,\infty)", B(r"(2, +\infty)"), T2, "+\\infty", False),
    (r"(2,\infty)", B(r"2 < x"), T2, "reversed inequality", False),
    (r"(-\infty, 0]", B(r"x \le 0"), T2, "x <= 0", False),
    (r"(-\infty, 0]", B(r"]-\infty, 0]"), T2, "French bracket on the left", False),
    (r"(-\infty, 0]", B("x < 0"), F2, "x < 0 leaves 0 out", ADV),
    (r"(-\infty, 0]", B(r"(-\infty, 0)"), F2, "open at 0", ADV),
    ("(3,4]", B("]3,4]"), T2, "French left-open", False),
    ("(3,4]", B(r"3 < x \leq 4"), T2, "chain inequality", False),
    ("(3,4]", B(r"3 \leq x < 4"), F2, "ends swapped", ADV),
    ("(3,4]", B("[3,4)"), F2, "other brackets", ADV),
    ("(3,4]", B("(3,4)"), F2, "open at 4", ADV),
    (r"(-\sqrt{3}, \sqrt{3})", B(r"-\sqrt{3} < x < \sqrt{3}"), T2, "chain with roots", False),
    (r"(-\sqrt{3}, \sqrt{3})", B(r"-\sqrt{3} \le x \le \sqrt{3}"), F2, "closed chain", ADV),
    (r"(-\sqrt{3}, \sqrt{3})", B(r"(-\sqrt{3}, \sqrt{3}]"), F2, "half-open", ADV),
    (UNION, B(r"x < 2 \text{ or } x > 3"), T2, "union as inequalities with or", False),
    (UNION, B(r"(-\infty,2)∪(3,\infty)"), T2, "unicode ∪", False),
    (UNION, B(r"(3, \infty) \cup (-\infty, 2)"), T2, "union in other order", False),
    (UNION, B("(2, 3)"), F2, "the complement", ADV),
    (UNION, B(r"x < 2 \text{ or } x \geq 3"), F2, "closed at 3", ADV),
    (UNION, B(r"(-\infty, 2] \cup [3, \infty)"), F2, "closed ends", ADV),
    (r"\left(\frac{3}{5},\frac{8}{3}\right]", B(r"\frac35 < x \le \frac83"), T2, "chain with fractions", False),
    (r"\left(\frac{3}{5},\frac{8}{3}\right]", B(r"(0.6, \frac{8}{3}]"), T2, "decimal end", False),
    (r"\left(\frac{3}{5},\frac{8}{3}\right]", B(r"(\frac{3}{5}, \frac{8}{3})"), F2, "open at 8/3", ADV),
    (r"(0,9) \cup (9,36)", B("(0,36)"), F2, "the hole at 9 filled", ADV),
    (r"\{1\pm\sqrt{5},-2\}", B(r"\lbrace -2, 1+\sqrt{5}, 1-\sqrt{5} \rbrace"), T2, "\\lbrace and ± spelt out", False),
    ("3, 5, 7", B(r"\{3, 5, 7\}"), T2, "set for a list", False),
    ("3, 5, 7", B(r"\{7, 3, 5\}"), T2, "set in other order", False),
    ("3, 5, 7", B("3, 5"), F2, "one missing", ADV),
    ("3, 5, 7", B("3, 5, 7, 9"), F2, "one too many", ADV),
    ("1,-2", B(r"-2, 1"), T2, "list in other order", False),
    ("1,-2", B("1, 2"), F2, "sign lost", ADV),
    (r"\emptyset", B(r"\varnothing"), T2, "\\varnothing", False),
    (r"\emptyset", B(r"\{\}"), T2, "empty braces", False),
    (r"\emptyset", B(r"\{0\}"), F2, "{0} is not empty", ADV),
    (r"(-\infty,\infty)", B(r"\mathbb{R}"), T2, "the reals", False),
    (r"(-\infty,\infty)", B(r"(0,\infty)"), F2, "half line", ADV),
    # thousands separators
    ("14916", B("14{,}916"), T2, "{,} separator", False),
    ("14916", B("14,916"), T2, "comma separator", False),
    ("14916", B(r"14\,916"), T2, "thin space separator", False),
    ("14916", B(r"14\ 916"), T2, "\\  separator", False),
    ("14916", B("14,196"), F2, "digits swapped", ADV),
    ("14916", B("1,4916"), F2, "not a thousands grouping", ADV),
    (r"10,\!080", B("10080"), T2, "gold with ,\\!", False),
    (r"10,\!080", B("10{,}080"), T2, "{,} against ,\\!", False),
    (r"10,\!080", B("10,800"), F2, "other number", ADV),
    (r"11,\! 111,\! 111,\! 100", B("11111111100"), T2, "three separators", False),
    (r"11,\! 111,\! 111,\! 100", B("11{,}111{,}111{,}100"), T2, "three {,}", False),
    (r"11,\! 111,\! 111,\! 100", B("1,111,111,100"), F2, "one digit short", ADV),
    ("58,500", B("58500"), T2, "gold with a comma", False),
    ("58,500", "The answer is 58,500.", L, "free text with a comma", False),
    ("58,500", "The answer is 58{,}500.", L, "free text with {,}", False),
    ("70000", "The answer is 70,000.", L, "free text thousands", False),
    ("70000", "#### 70,000", L, "GSM8K marker with a comma", False),
    ("1000", B("1,000.00"), T2, "cents", False),
    ("1234", B("(1,234)"), F2, "a pair is not a number", ADV),
    ("1234", B("1, 234"), F2, "a list is not a number", ADV),
    # \dfrac and \tfrac
    (r"\frac{14}{3}", B(r"\dfrac{14}{3}"), T2, "\\dfrac", False),
    (r"\frac{14}{3}", B(r"\tfrac{14}{3}"), T2, "\\tfrac", False),
    (r"\frac{14}{3}", B("14/3"), T2, "slash", False),
    (r"\frac{14}{3}", B(r"4\frac{2}{3}"), T2, "mixed number", False),
    (r"\frac{14}{3}", B(r"\dfrac{14}{5}"), F2, "other denominator", ADV),
    (r"\frac{14}{3}", B(r"\frac{3}{14}"), F2, "reciprocal", ADV),
    (r"\frac{14}{3}", B("4.67"), F2, "rounded decimal", ADV),
    (r"\dfrac{24}{17}", B(r"\frac{24}{17}"), T2, "\\frac for \\dfrac", False),
    (r"\dfrac{24}{17}", r"So the answer is $\tfrac{24}{17}$.", L, "\\tfrac in free text", False),
    (r"-\dfrac{13}{96}, \dfrac{13}{40}", B(r"\frac{13}{40}, -\frac{13}{96}"), T2, "two values, other order", False),
    (r"\frac{9 \sqrt{23}}{23}", B(r"\dfrac{9\sqrt{23}}{23}"), T2, "\\dfrac with a root", False),
    (r"\frac{9 \sqrt{23}}{23}", B(r"\frac{9}{\sqrt{23}}"), T2, "unrationalised", False),
    (r"\frac{1}{576}", B(r"\frac{1}{567}"), F2, "digits swapped", ADV),
    # degrees
    (r"90^\circ", B("90"), T2, "no degree sign", False),
    (r"90^\circ", B("90°"), T2, "unicode degree", False),
    (r"90^\circ", B(r"90^{\circ}"), T2, "braced \\circ", False),
    (r"90^\circ", B(r"90 \text{ degrees}"), T2, "degrees in words", False),
    (r"90^\circ", B(r"\text{90 degrees}"), T2, "all in \\text", False),
    (r"90^\circ", B(r"90{}^\circ"), T2, "{}^\\circ", False),
    (r"90^\circ", B(r"9^\circ"), F2, "9 degrees", ADV),
    (r"90^\circ", B(r"180^\circ"), F2, "180 degrees", ADV),
    (r"145^\circ", r"So the angle is $145^\circ$.", L, "degrees in free text", False),
    (r"145^\circ", "Answer: 145 degrees", L, "degrees in words, free text", False),
    (r"\frac{270}7\text{ degrees}", B(r"\frac{270}{7}^\circ"), T2, "fraction of degrees", False),
    (r"\frac{270}7\text{ degrees}", B(r"\dfrac{270}{7}"), T2, "no unit", False),
    (r"\frac{270}7\text{ degrees}", B(r"\frac{270}{7}\pi"), F2, "times pi", ADV),
    # percent
    (r"10\%", B("10"), T2, "percent sign dropped", False),
    (r"10\%", B(r"10 \%"), T2, "spaced \\%", False),
    (r"10\%", B("10 percent"), T2, "percent in words", False),
    ("10", B(r"10\%"), T2, "percent sign added", False),
    (r"25\%", "The answer is 25%.", L, "free-text percent", False),
    (r"25\%", B("0.25"), T2, "as a fraction of one", False),
    ("25", B("0.25"), F2, "0.25 is not 25", ADV),
    ("45", B(r"4.5\%"), F2, "4.5 percent", ADV),
    # units in \text{}
    ("5.4", B(r"5.4 \text{ cents}"), T2, "unit in \\text", False),
    (r"5.4 \text{ cents}", B("5.4"), T2, "unit dropped", False),
    (r"5.4 \text{ cents}", B(r"\text{5.4 cents}"), T2, "number inside \\text", False),
    (r"5.4 \text{ cents}", B(r"54 \text{ cents}"), F2, "54 cents", ADV),
    (r"864 \mbox{ inches}^2", B(r"864 \text{ in}^2"), T2, "abbreviated unit", False),
    (r"864 \mbox{ inches}^2", B("864"), T2, "bare number", False),
    (r"864 \mbox{ inches}^2", B("846"), F2, "digits swapped", ADV),
    (r"15\mbox{ cm}^2", B(r"15 \mathrm{~cm}^2"), T2, "\\mathrm{~cm}", False),
    (r"15\mbox{ cm}^2", B(r"15\,\text{cm}^{2}"), T2, "\\, and braced exponent", False),
    (r"\$18.90", B("18.90"), T2, "no dollar sign", False),
    (r"\$18.90", B(r"\$18.9"), T2, "trailing zero dropped", False),
    (r"\$18.90", B("18.09"), F2, "digits swapped", ADV),
    (r"\$36", B(r"36 \text{ dollars}"), T2, "dollars in words", False),
    (r"\$36", "She pays $36 in total.", L, "currency in free text", False),
    ("18", "Janet makes $18 every day at the farmers' market.", L, "GSM8K currency sentence", False),
    ("18", r"She sells 16 - 3 - 4 = 9 eggs and makes $9 \times 2 = $18.", L, "GSM8K, two dollar signs", False),
    ("5", B(r"5 \text{ m/s}"), T2, "unit with a slash", False),
    ("12", B(r"12 \text{ cm}^3"), T2, "cubic unit", False),
    ("2", B(r"2 \text{ and } 3"), F2, "two answers", ADV),
    # several boxes for a multi-part gold (lenient); strict takes the last box
    ("3, 5, 7", r"The primes are \boxed{3}, \boxed{5}, and \boxed{7}.", L, "three boxes", False),
    ("1,-2", r"<answer>\boxed{1} and \boxed{-2}</answer>", L, "two boxes in the answer block", False),
    ("1,-2", r"<answer>\boxed{1}, \boxed{2}</answer>", F2, "two boxes, one wrong", ADV),
    (
        r"-\dfrac{13}{96}, \dfrac{13}{40}",
        r"$a = \boxed{-\frac{13}{96}}$ or $a = \boxed{\frac{13}{40}}$",
        L,
        "boxes joined by or",
        False,
    ),
    (
        "3, 5",
        r"\boxed{3} wait, let me recheck the second case... \boxed{5}",
        F2,
        "two boxes but a retraction between",
        ADV,
    ),
    ("3, 5", r"\boxed{2}, \boxed{3}, \boxed{5}", F2, "three boxes for two parts", ADV),
    (
        r"0,i\sqrt{6},-i\sqrt{6}",
        r"(a) \boxed{0} (b) \boxed{i\sqrt{6}} (c) \boxed{-i\sqrt{6}}",
        L,
        "labelled parts",
        False,
    ),
    (
        r"\frac{-1+\sqrt{17}}{2}, \frac{-1-\sqrt{17}}{2}",
        r"$x_1 = \boxed{\frac{-1+\sqrt{17}}{2}}$ and $x_2 = \boxed{\frac{-1-\sqrt{17}}{2}}$",
        L,
        "subscripted variables",
        False,
    ),
    ("42", r"\boxed{6} \boxed{7}", F2, "two boxes for a one-part gold", ADV),
    # free text the lenient mode reads
    (r"\frac{1}{2}", r"Therefore, the probability is $\frac{1}{2}$.", L, "last inline span", False),
    (r"\frac{1}{2}", "The probability is 1/2.", L, "slash fraction, no LaTeX", False),
    ("0.5", r"The probability is $\frac12$.", L, "\\frac12 for 0.5", False),
    (r"3\sqrt{13}", r"The distance is $3\sqrt{13}$.", L, "root", False),
    ("6 - 5i", "Thus $z = 6 - 5i$.", L, "complex with z =", False),
    ("x=5", "Solving, we find $x = 5$.", L, "x = 5", False),
    (r"\text{Evelyn}", r"Evelyn is fastest, so the answer is $\text{Evelyn}$.", L, "a name", False),
    (r"\text{(C)}", "The answer is (C).", L, "multiple choice", False),
    ("p - q", "Hence the sum equals $p - q$.", L, "expression in letters", False),
    ("(6,31,-1)", "The ordered triple is $(6,31,-1)$.", L, "triple", False),
    (
        "204",
        "**Step 3.** Combine: 180 + 24 = 204.\n\nSo Aya's walk takes 204 minutes.",
        L,
        "AIME, number at the end",
        False,
    ),
    ("110", r"The final answer is $\boxed{110}$", T2, "boxed without an answer block", False),
    ("1.25", "The answer is 1.25", L, "decimal", False),
    (".0000672", "The answer is 0.0000672.", L, "small decimal, final period", False),
    ("326.5", "The answer is 326.5 meters.", L, "unit word", False),
    ("4210_{5}", "In base 5 this is $4210_5$.", L, "base subscript", False),
    ("2k+2", "The answer is $2k + 2$.", L, "expression", False),
    (r"3 \pm 2 \sqrt{2}", r"The roots are $3 \pm 2\sqrt{2}$.", L, "±", False),
    (r"\pi", r"The area is $\pi$.", L, "pi", False),
    (r"12\pi", r"The volume is $12\pi$ cubic units.", L, "unit after the span", False),
    ("y = -2x", "The line is $y = -2x$.", L, "line", False),
    (r"(2,12) \cup (12,102)", r"The set of values is $(2,12) \cup (12,102)$.", L, "union in free text", False),
    ("-2,1", "The solutions are $x = -2$ and $x = 1$.", L, "two spans joined by and", False),
    ("5", "The answer is 5 (since $2+3 = 5$).", L, "an aside in parentheses", False),
    ("7", r"We get \[ 3 + 4 = 7 \]", L, "a computation's result", False),
    (r"5x - 7y + 11z + 4 = 0", r"The plane is \[ 5x - 7y + 11z + 4 = 0 \]", L, "an equation is kept whole", False),
    (
        "3",
        "It takes 2 bolts of blue fiber and 2/2 = 1 bolt of white fiber, so 2 + 1 = 3 bolts in total.\n#### 3",
        L,
        "GSM8K solution",
        False,
    ),
    ("70000", "The profit is 200,000 - 130,000 = $70,000.", L, "GSM8K currency with separators", False),
    (
        "540",
        "He runs 3 * 3 = 9 sprints of 60 meters, so 9 * 60 = 540 meters a week.",
        L,
        "GSM8K, unit after the number",
        False,
    ),
    ("20", "She gives 3 * 20 = 60 cups in all, and 60 - 15 - 25 = 20 cups in the final meal.", L, "GSM8K chain", False),
    ("64", r"So he pays 8 * 5 + 8 * 3 = 64 dollars. Answer: \$64", L, "Answer: with an escaped dollar", False),
    ("42", "<answer>42</answer>", L, "answer block without a box", False),
    # free text: a wrong answer lenient extraction must not accept
    ("5", "7 is the answer, not 5.", F2, "the gold after 'not'", ADV),
    ("5", "The answer is 5? No. Recounting gives 6.", F2, "a question, then the real answer", ADV),
    ("12", "If the answer were 12, the total would exceed 100. So it must be 11.", F2, "hypothetical", ADV),
    (r"\frac{1}{2}", r"The probability is not $\frac{1}{2}$ but $\frac{1}{3}$.", F2, "span after 'not'", ADV),
    (
        r"\frac{1}{2}",
        r"We know $\frac{1}{2} + \frac{1}{3} = \frac{5}{6}$, so the probability is $\frac{5}{6}$.",
        F2,
        "gold inside a computation",
        ADV,
    ),
    ("4", r"Answer: 12. Check: $12 = 3 \cdot 4$.", F2, "anchored answer before a check", ADV),
    ("9", "Since 3^2 = 9, the side length is 3.", F2, "gold inside a power", ADV),
    ("100", "We have 100 people in the room, and the final count is 99", F2, "gold earlier", ADV),
    ("3", "There are 3 cases. Summing them gives 17 + 3 + 3 = 23.", F2, "gold as a summand", ADV),
    ("7", "Problem: find 3+4.\n\nI am not sure how to solve this.", F2, "no answer at all", ADV),
    ("2", "The answer is $x^2$.", F2, "gold as an exponent", ADV),
    ("5", "The answer is not 5.", F2, "only a negation", ADV),
    ("17", "Let's verify: 17 is prime. Therefore the sum is 19.", F2, "gold in a check", ADV),
    (
        "42",
        "We get $42$? That contradicts the constraint. The correct value is $24$.",
        F2,
        "question then correction",
        ADV,
    ),
    (r"\frac{3}{2}", r"The answer is $\frac{3}{2}$ or $\frac{2}{3}$.", F2, "hedging between two", ADV),
    (
        "6",
        "There are $6$ ways if order matters and $3$ ways otherwise; order does not matter, so $3$.",
        F2,
        "gold for another reading",
        ADV,
    ),
    ("-2,1", "The solutions are $x = -2$ and $x = 3$.", F2, "one of two wrong", ADV),
    ("1", "The solutions are $x = -2$ and $x = 1$.", F2, "two answers for a one-answer gold", ADV),
    # strict: rStar2's format
    ("42", "<answer>\\boxed{42}</answer>", T2, "the format", False),
    ("42", "\\boxed{42}", T2, "box without a block", False),
    ("42", "<answer>\\boxed{24}</answer> Actually \\boxed{42}", F2, "a box after the answer block", ADV),
    ("42", "<answer>no box</answer> \\boxed{42}", T2, "block without a box: the last box", False),
    ("42", "<answer>\\boxed{24}</answer> The answer is 42.", F2, "free text after a boxed answer", ADV),
    # the gold answers' own forms, boxed
    (r"\left( 3, \frac{\pi}{2} \right)", B(r"(3, \pi/2)"), T2, "polar point", False),
    (r"\left( 3, \frac{\pi}{2} \right)", B(r"(\frac{\pi}{2}, 3)"), F2, "coordinates swapped", ADV),
    ("6 - 5i", B("6-5i"), T2, "spacing", False),
    ("6 - 5i", B("-5i+6"), T2, "terms reordered", False),
    ("6 - 5i", B("6+5i"), F2, "conjugate", ADV),
    ("x=5", B("5"), T2, "x= dropped", False),
    ("x=5", B("x = 5.0"), T2, "5.0", False),
    ("x=5", B("x=-5"), F2, "sign", ADV),
    (r"\text{east}", B("East"), T2, "capitalised word", False),
    (r"\text{even}", B(r"\text{odd}"), F2, "other word", ADV),
    (r"11\sqrt2", B(r"11\sqrt{2}"), T2, "braced root", False),
    (r"11\sqrt2", B(r"\sqrt{242}"), T2, "root not simplified", False),
    (r"11\sqrt2", B(r"11\sqrt3"), F2, "other root", ADV),
    ("y = 2x + 3", B("2x+3"), T2, "right side only", False),
    ("y = 2x + 3", B("y=3+2x"), T2, "terms reordered", False),
    ("y = 2x + 3", B("y = 3x + 2"), F2, "coefficients swapped", ADV),
    ("x^3+3x-6", B("3x + x^3 - 6"), T2, "polynomial reordered", False),
    ("x^3+3x-6", B("x^3+3x+6"), F2, "sign of the constant", ADV),
    ("(a+5)(b+2)", B("(b+2)(a+5)"), T2, "factors reordered", False),
    ("(a+5)(b+2)", B("ab + 2a + 5b + 10"), T2, "expanded", False),
    ("5x - 7y + 11z + 4 = 0", B("5x-7y+11z+4=0"), T2, "plane, spacing", False),
    (r"1 \pm \sqrt{19}", B(r"1+\sqrt{19}, 1-\sqrt{19}"), T2, "± spelt out", False),
    (r"\cot x", B(r"\frac{\cos x}{\sin x}"), T2, "cot as a quotient", False),
    (r"2\sqrt{5}", B(r"\sqrt{20}"), T2, "root not simplified", False),
    (r"2\sqrt{5}", B("4.47"), F2, "rounded", ADV),
    (r"\frac{\sqrt{3}}{3}", B(r"\frac{1}{\sqrt{3}}"), T2, "unrationalised", False),
    (
        r"\dfrac{4^{2024}}{\binom{4048}{2024}}-2",
        B(r"\frac{4^{2024}}{\binom{4048}{2024}} - 2"),
        T2,
        "HMMT, \\frac for \\dfrac",
        False,
    ),
    (r"2^{25} \cdot 26!", B(r"26! \cdot 2^{25}"), T2, "factors reordered", False),
    (r"2^{25} \cdot 26!", B(r"2^{26}\cdot 25!"), F2, "other exponent and factorial", ADV),
    (r"1-\frac{2}{\pi}", B(r"\frac{\pi-2}{\pi}"), T2, "one fraction", False),
    (r"\sqrt{\frac{95}{24}}", B(r"\frac{\sqrt{570}}{12}"), T2, "rationalised", False),
    (r"64(2-\sqrt{3})", B(r"128 - 64\sqrt{3}"), T2, "expanded", False),
    (r"14+4\sqrt{37}", B(r"4\sqrt{37}+14"), T2, "reordered", False),
    (r"\frac{9\sqrt{410}}{5}", B(r"\frac{9}{5}\sqrt{410}"), T2, "coefficient outside", False),
    ("100", B("10^2"), T2, "a power", False),
    ("2", B(r"\sqrt{4}"), T2, "a root", False),
    ("1", B("1.5"), F2, "gold as a prefix", ADV),
    ("10", B("1"), F2, "a digit dropped", ADV),
    ("3", B("3x"), F2, "a variable attached", ADV),
    ("3", B("x^3"), F2, "gold as an exponent", ADV),
    (r"\frac{1}{3}", B("0.333"), F2, "rounded", ADV),
    (r"\frac{1}{3}", B(r"0.\overline{3}"), T2, "repeating decimal", False),
]

# Written after the grader's first run, as models write final answers, labels by hand
# before grading them: a check on forms the equivalences above were not written for.
LATER: list[tuple[str, str, dict[str, bool], str, bool]] = [
    ("42", "So the count is\n\\[\n\\boxed{42}\n\\]", T2, "Qwen: display box", False),
    ("42", "The final answer is: $\\boxed{42}$", T2, "Llama: 'The final answer is: $\\boxed{}$'", False),
    ("0.75", r"The final answer is: $\boxed{\frac{3}{4}}$", T2, "Llama, fraction for a decimal", False),
    ("42", "**Answer: 42**", L, "bold answer line", False),
    ("7", "### Final Answer\nThe number of ways is **7**.", L, "Final Answer heading, then a sentence", False),
    ("4", "### Final Answer\nThe number of ways is **7**, not 4.", F2, "heading, sentence, the gold after 'not'", ADV),
    ("5", r"Thus, the answer is $\boxed{5}$ apples.", T2, "box inside a sentence", False),
    ("5", "\\boxed{5}.\n\nHope this helps!", T2, "trailing pleasantry", False),
    ("12", r"So $n = \boxed{12}$", T2, "box after n =", False),
    (r"\frac{3}{56}", B("3/56"), T2, "slash for \\frac", False),
    ("2516_8", B("2516_{8}"), T2, "braced base", False),
    (r"\text{(C)}", B("C"), T2, "letter only", False),
    (r"\text{(C)}", B(r"\textbf{(C)}"), T2, "bold choice", False),
    (r"\text{(C)}", B("D"), F2, "other choice", ADV),
    ("1,-2", B("x=1, x=-2"), T2, "solutions with x =", False),
    ("3, 5, 7", B("3,5,7"), T2, "no spaces", False),
    (r"-\frac{\pi}{6}", B(r"-\pi/6"), T2, "slash with pi", False),
    (r"-\frac{\pi}{6}", B(r"\frac{-\pi}{6}"), T2, "sign in the numerator", False),
    (r"-\frac{\pi}{6}", B(r"\frac{\pi}{6}"), F2, "sign lost", ADV),
    ("0.15", B(r"\frac{3}{20}"), T2, "fraction for a decimal", False),
    ("0.15", B(r"15\%"), T2, "percent for a decimal", False),
    (r"\frac{1}{4}", B("0.25"), T2, "decimal for a fraction", False),
    ("36", B(r"36^\circ"), T2, "degrees added", False),
    ("10", B(r"10\text{ inches}"), T2, "unit added", False),
    ("8", B("2^3"), T2, "a power", False),
    ("1.25", B(r"\frac{5}{4}"), T2, "fraction", False),
    ("1.25", B(r"1\frac14"), T2, "mixed number", False),
    ("6+9i", B("9i+6"), T2, "complex reordered", False),
    (r"\text{Navin}", B("Navin"), T2, "name without \\text", False),
    ("3", "**3**", L, "bold number only", False),
    ("81", r"Thus there are \(\boxed{81}\) numbers.", T2, "box inside \\( \\)", False),
    ("4", "Answer: 4.", L, "Answer: with a period", False),
    ("100", "So the answer is $100$ dollars.", L, "span then a unit", False),
    (r"\frac{11}{36}", r"The probability is $\dfrac{11}{36} \approx 0.306$.", L, "exact value then \\approx", False),
    ("2", "The remainder is $2$.\n\nI hope this helps!", L, "pleasantry after the span", False),
    (
        "2",
        r"The remainder is $2$. Let me double-check: $17 = 3 \cdot 5 + 2$. Yes.",
        L,
        "a check after the answer",
        False,
    ),
    ("5", r"The answer is $\boxed{5}$", T2, "anchored box", False),
    ("5", r"Let me box the candidates: \boxed{5} is wrong, \boxed{6} is right.", F2, "the last box is the other", ADV),
    ("2", "**Answer:** 12", F2, "gold as a suffix", ADV),
    ("1", "The answer is 1/2.", F2, "gold as a numerator", ADV),
    ("3", "$$3x + 2 = 11$$", F2, "gold as a coefficient", ADV),
    ("11", "$$3x + 2 = 11$$", F2, "gold as the right side of an unsolved equation", ADV),
    ("6", "6 is not correct; the right count is 8.", F2, "gold rejected first", ADV),
    ("49", "The answer is $7^2 = 49$.", L, "computation in the span", False),
    (r"\frac{5}{6}", r"So $P = \frac{5}{6}$.", L, "P =", False),
    ("-3", "Hence $k=-3$.", L, "k =", False),
    ("3", "Hence $k=-3$.", F2, "sign", ADV),
    ("(1,2)", "The point is $(1, 2)$.", L, "point", False),
    ("(1,2)", "The point is $(2, 1)$.", F2, "point swapped", ADV),
    ("1,2", "The solutions are 1 and 2.", L, "two plain numbers joined by and", False),
    ("10", "Total: 10 cookies.", L, "unit word after a number", False),
    (r"\sqrt{2}", r"The length is $\sqrt2$ units.", L, "short root", False),
    (
        r"\frac{\sqrt{3}}{2}",
        r"We find $\sin 60^\circ = \frac{\sqrt{3}}{2}$.",
        L,
        "value after a function of a number",
        False,
    ),
    ("18", "She sells 9 eggs at $2 each: 9 \\times 2 = 18. So she makes $18.", L, "GSM8K with prices", False),
    ("5", "<answer>The answer is 5.</answer>", L, "answer block, free text", False),
    (r"\infty", r"The limit is $\infty$.", L, "infinity", False),
    ("0", "The answer is 0.", L, "zero", False),
    ("0", "The answer is 10.", F2, "gold as the last digit", ADV),
    ("-1", "The answer is \u22121.", L, "unicode minus", False),
    ("2", "The answer is $-2$.", F2, "sign", ADV),
    ("1", "The answer is $-1$.", F2, "sign", ADV),
    (r"\$1.50", "Each costs $1.50.", L, "currency, no closing dollar", False),
    ("1.5", r"It costs $\$1.50$.", L, "escaped dollar in a span", False),
    ("50", "That is a 50% increase.", L, "percent in prose", False),
    ("3", "So we need **3** more.", L, "bold number in a sentence", False),
    ("7", "Final answer: **7**", L, "bold after Final answer:", False),
    ("7", "## Final Answer\n**7**", L, "heading then bold", False),
    ("20", "Step 1: 4 * 5 = 20.\nStep 2: 20 + 5 = 25.\nAnswer: 25", F2, "gold an intermediate step", ADV),
    # session of 2026-12-06 (sixth): hedges and qualified values, numbers as written
    ("2", B(r"x = 1 \text{ or } x = 2"), F2, "hedge: two values for one", ADV),
    ("2", B(r"1 \lor 2"), F2, "hedge: \\lor", ADV),
    ("2", B(r"x=1 \quad x=2"), F2, "hedge: two statements", ADV),
    ("2", B(r"1 \text{ (or } 2)"), F2, "hedge: (or 2)", ADV),
    ("(1, 2)", B(r"(1, 2) \text{ or } (2, 1)"), F2, "hedge: two pairs", ADV),
    ("2", B(r"2 \text{ is not the answer}"), F2, "value taken back", ADV),
    ("2", B(r"2 \text{ (wrong)}"), F2, "value marked wrong", ADV),
    ("2", B(r"\text{at least } 2"), F2, "value bounded", ADV),
    ("2", B(r"2 \text{ or more}"), F2, "value bounded: or more", ADV),
    ("2", B(r"\ge 2"), F2, "a relation, no value", ADV),
    ("1, 2", B(r"x = 1 \text{ or } x = 2"), T2, "alternatives for a list gold", False),
    ("5", B(r"5 \text{ more minutes}"), T2, "'more' in a unit", False),
    ("(2, 3)", r"So $x = \boxed{2}$ and $y = \boxed{3}$.", L, "a pair in two boxes, in order", False),
    ("(2, 3)", r"So $x = \boxed{3}$ and $y = \boxed{2}$.", F2, "a pair in two boxes, swapped", ADV),
    (V3, B(r"\left(-\frac13, \frac23, \frac53\right)"), L, "vector as a tuple", False),
    (V3, B(r"\left(\frac23, -\frac13, \frac53\right)"), F2, "vector as a tuple, reordered", ADV),
    ("12", "The answer is twelve.", L, "number word", False),
    ("12", "The answer is eleven.", F2, "number word, another number", ADV),
    ("1500", r"The answer is $1.5 \times 10^3$.", L, "scientific notation", False),
    ("1500", "The answer is 1.5e3.", L, "e-notation", False),
    ("(1,-2)", "The center is at (1, -2).", L, "a tuple in prose", False),
    ("42", "Sprawdzamy: 7 + 35 = 42.\nOdpowiedź: 42", L, "Polish 'answer:'", False),
    ("42", "नतीजा 7 + 35 = 41 नहीं है।\nउत्तर: 42", L, "Hindi 'answer:'", False),
    ("1000.99", "The total is €1,000.99.", L, "euro sign", False),
]


def hand_cases() -> list[dict]:
    return [
        {"gold": g, "response": r, "expected": e, "note": f"hand: {note}", "adversarial": adv}
        for g, r, e, note, adv in HAND
    ] + [
        {"gold": g, "response": r, "expected": e, "note": f"later: {note}", "adversarial": adv}
        for g, r, e, note, adv in LATER
    ]


# --- the gold answers again, in the shapes reasoning models' responses take ----------------

# Each family's thinking and final answer as its raw text reads (chat templates' tokens
# kept, or lost to a decode that skips special tokens); G is the gold, W another answer.
FAMILY_FORMS = [
    (
        "Llama 3",
        lambda g, w: f"## Step 1\n...\n\nTherefore, the final answer is: $\\boxed{{{g}}}$. I hope it is correct.",
        BOTH_TRUE,
    ),
    (
        "Minerva",
        lambda g, w: f"We compute.\nFinal Answer: The final answer is ${g}$. I hope it is correct.",
        LENIENT_ONLY,
    ),
    (
        "DeepSeek-R1, Qwen3",
        lambda g, w: f"<think>\nTry {w}? \\boxed{{{w}}} fails.\n</think>\n\nSo $\\boxed{{{g}}}$.",
        BOTH_TRUE,
    ),
    (
        "gpt-oss, harmony tokens kept",
        lambda g, w: (
            f"<|channel|>analysis<|message|>Maybe \\boxed{{{w}}}.<|end|><|start|>assistant<|channel|>final<|message|>**Answer:** ${g}$<|return|>"
        ),
        LENIENT_ONLY,
    ),
    (
        "gpt-oss, special tokens skipped",
        lambda g, w: f"analysisWe need it. Maybe \\boxed{{{w}}}.assistantfinal\\boxed{{{g}}}",
        BOTH_TRUE,
    ),
    (
        "Magistral",
        lambda g, w: f"[THINK]Is it {w}? \\boxed{{{w}}}? No.[/THINK]\n\n# Answer\n\n\\boxed{{{g}}}",
        BOTH_TRUE,
    ),
    (
        "Sky-T1, OpenThinker",
        lambda g, w: (
            f"<|begin_of_thought|>\\boxed{{{w}}}?<|end_of_thought|>\n\n<|begin_of_solution|>\\boxed{{{g}}}<|end_of_solution|>"
        ),
        BOTH_TRUE,
    ),
    (
        "Command A",
        lambda g, w: (
            f"<|START_THINKING|>\\boxed{{{w}}}?<|END_THINKING|><|START_RESPONSE|>The answer is ${g}$.<|END_RESPONSE|>"
        ),
        LENIENT_ONLY,
    ),
    (
        "Kimi",
        lambda g, w: f"\u25c1think\u25b7\\boxed{{{w}}}?\u25c1/think\u25b7The answer is $\\boxed{{{g}}}$.",
        BOTH_TRUE,
    ),
    ("Seed-OSS", lambda g, w: f"<seed:think>\\boxed{{{w}}}?</seed:think>So the answer is $\\boxed{{{g}}}$.", BOTH_TRUE),
    (
        "a display after 'the answer is'",
        lambda g, w: f"Checking {w} fails, hence the answer is\n$$\n{g}\n$$",
        LENIENT_ONLY,
    ),
]
# The gold boxed only while thinking, then another answer in words, or no end to the
# thinking: wrong, though the response's only box is the gold.
FAMILY_TRAPS = [
    ("DeepSeek-R1: gold boxed in thinking", lambda g, w: f"<think>\\boxed{{{g}}}? No.</think>\nThe answer is {w}."),
    ("cut off while thinking", lambda g, w: f"<think>\nSo it is \\boxed{{{g}}}, let me double-check"),
    (
        "gpt-oss, tokens skipped: gold boxed in analysis",
        lambda g, w: f"analysisIt is \\boxed{{{g}}}. Hmm.assistantfinalIt is {w}.",
    ),
    ("Magistral: gold boxed in thinking", lambda g, w: f"[THINK]\\boxed{{{g}}}? No.[/THINK]The answer is {w}."),
    ("Magistral: cut off while thinking", lambda g, w: f"[THINK]So it is \\boxed{{{g}}}, let me"),
    (
        "Kimi: gold boxed in thinking",
        lambda g, w: f"\u25c1think\u25b7\\boxed{{{g}}}?\u25c1/think\u25b7The answer is {w}.",
    ),
    (
        "Command A: gold boxed in thinking",
        lambda g, w: (
            f"<|START_THINKING|>\\boxed{{{g}}}?<|END_THINKING|><|START_RESPONSE|>The answer is {w}.<|END_RESPONSE|>"
        ),
    ),
    ("EXAONE Deep: gold boxed in thinking", lambda g, w: f"<thought>\\boxed{{{g}}}?</thought>\nThe answer is {w}."),
]


def family_cases() -> list[dict]:
    """Every distinct gold of the competition sets once more, in a model family's
    shape (rotating); every third integer gold in a trap instead."""
    cases, seen, ints = [], set(), 0
    for name in ["math500", "aime24", "aime25", "hmmt_feb2024", "hmmt_feb2025"]:
        for g in golds(name):
            if g in seen:
                continue
            seen.add(g)
            w = "7" if g.strip() != "7" else "8"
            if re.fullmatch(r"-?\d+", g) and (ints := ints + 1) % 3 == 0:
                note, form = FAMILY_TRAPS[ints // 3 % len(FAMILY_TRAPS)]
                expected, adversarial = BOTH_FALSE, True
            else:
                note, form, expected = FAMILY_FORMS[len(seen) % len(FAMILY_FORMS)]
                adversarial = False
            cases.append(
                {
                    "gold": g,
                    "response": form(g, w),
                    "expected": expected,
                    "note": f"{name}: {note}",
                    "adversarial": adversarial,
                }
            )
    return cases


# --- MATH-500's gold answers once more, taken back or kept in other languages -------------

# A value named and taken back for another ("not W, but G"), before or after its
# negation: kept as written (equal), and with W and G swapped (the gold taken back);
# a bound or a question before the gold.  No box: the right ones pay in lenient mode only.
TAKEN_BACK = [
    ("German: nicht W, sondern G", lambda g, w: f"Die Antwort ist nicht ${w}$, sondern ${g}$."),
    ("Japanese: W ではなく G", lambda g, w: f"答えは${w}$ではなく${g}$です。"),
    ("Korean: W 가 아니라 G", lambda g, w: f"답은 ${w}$가 아니라 ${g}$입니다."),
    ("Chinese: G 而不是 W", lambda g, w: f"答案是${g}$而不是${w}$。"),
    ("Russian: не W, а G", lambda g, w: f"Ответ: не ${w}$, а ${g}$."),
]
LANGUAGE_FORMS = [*TAKEN_BACK, ("a question, then the answer", lambda g, w: f"Answer: ${w}$? No. Answer: ${g}$.")]
LANGUAGE_TRAPS = [(f"{note}, G and W swapped", lambda g, w, form=form: form(w, g)) for note, form in TAKEN_BACK] + [
    ("Portuguese: não é G", lambda g, w: f"A resposta não é ${g}$."),
    ("a bound: at least G", lambda g, w: f"The answer is at least ${g}$."),
    ("a question, then another answer", lambda g, w: f"My answer: ${g}$? Let me recheck... it's ${w}$."),
]


def language_cases() -> list[dict]:
    """Every distinct gold of MATH-500 once more: alternately kept (rotating through
    `LANGUAGE_FORMS`) and taken back (`LANGUAGE_TRAPS`)."""
    cases, seen = [], []
    for g in golds("math500"):
        if g in seen:
            continue
        seen.append(g)
        w, i = ("7" if g.strip() != "7" else "8"), len(seen) - 1
        if i % 2:
            (note, form), expected, adversarial = LANGUAGE_TRAPS[i // 2 % len(LANGUAGE_TRAPS)], BOTH_FALSE, True
        else:
            (note, form), expected, adversarial = LANGUAGE_FORMS[i // 2 % len(LANGUAGE_FORMS)], LENIENT_ONLY, False
        case = {"gold": g, "response": form(g, w), "expected": expected, "note": f"math500: {note}"}
        cases.append(case | {"adversarial": adversarial})
    return cases


def main() -> None:
    cases = gold_cases() + hand_cases() + family_cases() + language_cases()
    with (HERE / "grader_pairs.jsonl").open("w") as f:
        for case in cases:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases, {sum(c['adversarial'] for c in cases)} adversarial")


if __name__ == "__main__":
    main()
