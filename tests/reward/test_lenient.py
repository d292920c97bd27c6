"""The lenient grading mode: where a response without rStar2's format puts its answer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rstar2_async.reward import Grader, extract_answer, final_answer, score

FREE_TEXT = [
    # anchored answers, rightmost first
    ("The answer is 42.", "42"),
    ("So the final answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("**Answer:** 14,916", "14,916"),
    ("**Answer: 42**", "42"),
    ("Answer: x = 5", "x = 5"),
    ("#### 72", "72"),
    ("**Final Answer**\n\\[ 42 \\]", "42"),
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5"),
    ("The answer is 7, not 5.", "7"),
    ("The answer is 5 (since $2+3 = 5$).", "5"),
    ("Therefore, the final answer is 105. Check: 102 is too big.", "105"),
    ("The solutions are $x = -2$ and $x = 1$.", "-2, 1"),
    ("The answer is $\\frac{3}{2}$ or $\\frac{2}{3}$.", "\\frac{3}{2}, \\frac{2}{3}"),
    # an anchored sentence of prose: after its last copula outside math, else its first value
    ("Answer: Janeth will still owe $220 in 12 months.", "220"),  # math-verify's lazy match
    ("Réponse : elle doit encore 220 $ d'ici 12 mois.", "220"),
    ("Answer: the point $(1,2)$ lies on the line $y=2x$", "(1,2)"),  # `=` inside math is no copula
    ("Answer: the line we want is $y = 2x + 1$", "y = 2x + 1"),
    ("Answer: the roots $1$ and $2$ of the quadratic", "1, 2"),
    ("Answer: after 3 years the balance is 120 dollars", "120 \\text{ dollars}"),
    ("The answer is 5 or 6.", "5, 6"),  # a hedge is both values, not its first
    ("The answer is either 5 or maybe 6.", "5, 6"),
    ("The answer is 1,000 and 2,000.", "1000, 2000"),
    ("The answer is 5 apples.", "5"),
    # "answer" and a colon in the other languages of lighteval's multilingual extraction
    ("Sprawdzamy: 7 + 35 = 42.\nOdpowiedź: 42 jabłka, nie 7.", "42"),
    ("نحسب 7 + 35 = 42.\nالإجابة النهائية: 42", "42"),
    ("7 + 35 = 42. उत्तर: 42", "42"),
    ("คำตอบ: 42 ลูก", "42"),  # Thai and Indic words hold vowel signs that `\w` does not match
    ("उत्तर: 42 सेब", "42"),
    ("Jawaban: $\\frac{1}{2}$", "\\frac{1}{2}"),
    ("Svar på frågan blir 7 och sedan 42", "42"),  # no colon: no anchor, the last number
    # no anchor: the rightmost math span or number
    ("We get \\[ x = \\frac{3}{4} \\]", "x = \\frac{3}{4}"),
    ("We get \\[ 3 + 4 = 7 \\]", "7"),
    ("The plane is \\[ 5x - 7y + 11z + 4 = 0 \\]", "5x - 7y + 11z + 4 = 0"),
    ("Thus $x \\in (2, \\infty)$.", "x \\in (2, \\infty)"),
    ("so we have 1,234,567 ways", "1,234,567"),
    ("so she has 1 000 left", "1 000"),
    # what follows the final value and only restates or checks it is cut
    ("Hence $x = 3$.\n\nVerification: $2(3) + 1 = 7$.", "x = 3"),
    ("The remainder is $2$. Let me double-check: $17 = 3 \\cdot 5 + 2$. Yes.", "2"),
    ("x = 3.\nCheck: 2(3) + 1 = 7, but we need 8, so x = 3.5.", "3.5"),  # a check that concludes stays
    ("The probability is 1/6, which is approximately 0.1667.", "1/6"),
    # where an optimum is reached is no answer; without an optimum it may be
    ("The minimum value is 2, attained at $x = 1$.", "2"),
    ("The maximum is $5$, which occurs when $t=3$.", "5"),
    ("The maximum area is 50 when x = 5 and y = 10.", "50"),
    ("The minimum occurs at x = 1.", "1"),
    ("We get f(n) = 5 when n = 3.", "3"),
    ("So the probability is $\\frac{1}{6}$, or about $0.167$.", "\\frac{1}{6}"),
    ("The probability is $\\frac{1}{6}$ (about 16.7%).", "\\frac{1}{6}"),
    ("The area is 25 square units (5 x 5).", "25"),
    ("It takes 3 hours to travel about 120 km.", "120 \\text{ km}"),  # no comma: no restatement
    ("The point is (1, 2).", "(1, 2)"),
    ("The pairs are $(7,11), (11,7)$", "(7,11), (11,7)"),  # no aside inside math
    # plain values listed after the last copula of the last sentence
    ("The solutions are 1 and 2.", "1, 2"),
    ("The possible values are 2 or 3.", "2, 3"),
    ("I bought 3 apples and 4 pears.", "4"),  # thousands in groups of a space, as math-verify reads them
    ("He bought 5 100-page books.", "100"),  # not 5100
    ("Result: 42", "42"),  # a one-word label before a bare answer
    ("Total = 1,234", "1,234"),
    ("Therefore 3\\sqrt{2}.", "3\\sqrt{2}"),
    ("The value is 2\\pi", "2\\pi"),  # a factor written onto the number
    ("The angle measures 30^\\circ.", "30^\\circ"),
    ("### Answer\n3x + 2", "3x + 2"),  # a heading anchors the line below it
    ("**Answer**\n\\frac{1}{2}", "\\frac{1}{2}"),
    ("That leaves 45% of the class.", "45%"),
    ("He pays $5 and gets $3 back, so he has 18 dollars.", "18 \\text{ dollars}"),  # currency, not math
    ("The result is 3.14.", "3.14"),
    ("\\$15{,}000", "\\$15{,}000"),  # an escaped dollar is no math span: a bare answer
    ("The center is at (1, -2).", "(1, -2)"),  # a tuple of numbers in prose
    ("so x lies in [0.5, 3) here", "[0.5, 3)"),
    ("We get f(1, 2) = 5", "5"),  # arguments are no tuple
    ("The answer is five.", "five"),  # read as 5 when compared (test_normalise)
    ("The answer is 1.5e3.", "1.5e3"),
    # negations and questions are never the answer
    ("7 is the answer, not 5", "7"),
    ("The answer is not 5. It is 7.", "7"),
    ("The answer is 5? No. Recounting gives 6.", "6"),
    ("The answer is not 5.", None),
    ("Answer: it is not $5$.", "it is not $5$"),  # a negated span is no value, first or last
    ("Answer: she has not $5$ apples", "she has not $5$ apples"),
    # ... in other languages: the value taken back is no answer, before or after its negation
    ("Die Antwort ist nicht 5, sondern 7.", "7"),
    ("Ответ: не 5, а 7.", "7"),
    ("A resposta não é 5.", None),
    ("La risposta non è 5; è 7.", "7"),
    ("答案是7而不是5。", "7"),
    ("答えは5ではなく7です。", "7"),
    ("답은 5가 아니라 7입니다.", "7"),
    ("정답은 $7$입니다. $5$가 아닙니다.", "7"),  # Korean and Japanese negate after the value
    ("7です。$5$ではない。", "7"),
    ("My answer: $5$? Let me recheck... it's $7$.", "7"),  # a question, after a span too
    ("The answer is non-negative.", "non-negative"),  # no "non" of the negations
    # a bound or a hedge before the value stays with it, for the grader to refuse
    ("The answer is at least 42.", "at least 42"),
    ("The answer is probably 42.", "probably 42"),
    ("The answer is between 5 and 6.", "between 5 and 6"),
    # values that name what they count, joined in an answer, are all of it: not the first
    ("The answer is 5 hours and 30 minutes.", "5, 30"),
    ("Answer: 3 boys and 2 girls", "3, 2"),
    # a unit of measure after the value stays with it, for the grader to hold to the gold's
    ("The answer is 120 dollars.", "120 \\text{ dollars}"),
    ("Answer: 5 square feet", "5 \\text{ square feet}"),
    ("The answer is 5 apples.", "5"),  # no unit
    ("The answer is 5 in total.", "5"),  # `in` is no inch in prose
    ("The answer is 5 miles per hour.", "5"),  # a rate: its number alone, as before
    ("The answer is 5 cm squared.", "5"),
    ("The answer is 7 km.", "7 \\text{ km}"),  # a unit of two letters too
    ("The answer is almost 42.", "almost 42"),
    ("no numbers here", None),
    ("", None),
    # a metric unit written onto its number; never the head of a longer number or a power
    ("The plot measures 2,500.75m² in all.", "2,500.75"),
    ("It weighs 12kg.", "12 \\text{ kg}"),
    ("The side is 4 and the area is 4².", "4"),
    # a parenthesis that opens with a LaTeX command is `\\(...\\)` without its backslashes
    ("答案：每人分到 (\\frac{3}{4}) 个。", "\\frac{3}{4}"),
    ("So each gets (\\frac{3}{4}) of it.", "\\frac{3}{4}"),
    ("The answer is 12 (\\text{see above}).", "12"),
    ("The answer is 22/7 (\\approx 3.14).", "22/7"),  # after a value, an aside still
    # after an operator, a comma or a command a parenthesis is the value going on
    ("#### (0,9) \\cup (9,36)", "(0,9) \\cup (9,36)"),
    ("The answer is (1,2), (3,4).", "(1,2), (3,4)"),
    ("The answer is 3 \\times (4+5).", "3 \\times (4+5)"),
    ("The answer is 12 (since 3*4=12).", "12"),
    ("#### \\left( (1)/(4), \\frac{3}{4} \\right)", "\\left( (1)/(4), \\frac{3}{4} \\right)"),
    ("#### (\\sqrt{33} - 3)/(3)", "(\\sqrt{33} - 3)/(3)"),  # a group, not `\\(...\\)` lost
    ("#### ( \\frac{1}{6}, \\frac{1}{6} )", "(\\frac{1}{6}, \\frac{1}{6})"),  # a pair
    ("#### 2xy + 10x + 20y + 100", "2xy + 10x + 20y + 100"),  # variables after a coefficient: no prose
    ("#### \\text{Softball, Kickball, Picnic}", "\\text{Softball, Kickball, Picnic}"),  # no end in braces
    ("#### (-4, 27);(2, 15)", "(-4, 27);(2, 15)"),  # a semicolon before a value separates
    ("#### 5; 6", "5; 6"),  # two values, not 5
    ("The answer is (1,2); (3,4).", "(1,2); (3,4)"),
    ("Answer: x=1; y=2", "x=1; y=2"),
    ("The answer is 5; the rest follows.", "5"),  # before prose, a semicolon ends it
    ("#### -1, \\; -5", "-1, \\; -5"),  # LaTeX's space `\\;` ends nothing
    ("#### AB=9, CD=4", "AB=9, CD=4"),
    ("#### (2) (x+2) (x-2)", "(2) (x+2) (x-2)"),  # groups that multiply: no aside
    ("The answer is f(3) (see above).", "f(3)"),  # an aside after a group
    (
        "#### \\mathbf{0.56 = 56\\%}",
        "0.56 = 56\\%",
    ),  # bold type is no part of it  # points' names are no prose, and no word ends an answer
    ("#### ( \\frac{2}{3}, 1 ) \\cup (7,\\infty)", "( \\frac{2}{3}, 1 ) \\cup (7,\\infty)"),
    # an equation whose bound holds an `=` is one equation, not a chain
    ("$F_n = \\sum_{k=0}^{n-1} F_k$", "F_n = \\sum_{k=0}^{n-1} F_k"),
]


@pytest.mark.parametrize(("text", "answer"), FREE_TEXT)
def test_free_text_answer(text: str, answer: str | None) -> None:
    assert final_answer(text, mode="lenient") == answer
    assert final_answer(text, mode="strict") is None  # no box, no answer


@pytest.mark.parametrize(
    ("text", "gold", "answer"),
    [
        ("The primes are \\boxed{3}, \\boxed{5}, and \\boxed{7}.", "3, 5, 7", "3, 5, 7"),
        ("(a) \\boxed{3} (b) \\boxed{5}", "\\{3,5\\}", "3, 5"),
        ("$x_1 = \\boxed{1}$ and $x_2 = \\boxed{2}$", "1, 2", "1, 2"),
        ("<answer>\\boxed{1} and \\boxed{-2}</answer>", "1,-2", "1, -2"),
        # not one answer in parts: the last box, as strict mode reads it
        ("\\boxed{3} wait, let me recheck... \\boxed{5}", "3, 5", "5"),
        ("\\boxed{2}, \\boxed{3}, \\boxed{5}", "3, 5", "5"),  # three in a row for two parts
        ("\\boxed{6} \\boxed{7}", "42", "7"),  # a one-part gold
        ("\\boxed{3} and \\boxed{4} and \\boxed{5}", "(3, 5)", "5"),  # three in a row for a pair
        # a tuple's parts, in their order (math-verify reads them so), each may be named
        ("\\boxed{3} and \\boxed{5}", "(3, 5)", "(3, 5)"),
        ("\\boxed{5} and \\boxed{3}", "(3, 5)", "(5, 3)"),
        ("So $x = \\boxed{2}$ and $y = \\boxed{-1}$.", "(2, -1)", "(2, -1)"),
        ("Therefore $\\boxed{x=2}$, $\\boxed{y=-1}$.", "(2,-1)", "(2, -1)"),
        ("<answer>\\boxed{24}</answer> Actually \\boxed{42} and \\boxed{1}", "42, 1", "24"),
        # between inline math spans, named: `\\(a = \\boxed{4}\\) and \\(b = ...`
        ("\\(a = \\boxed{4}\\) and \\(b = \\boxed{9}\\)", "4, 9", "4, 9"),
    ],
)
def test_several_boxes_for_a_multi_part_gold(text: str, gold: str, answer: str) -> None:
    assert final_answer(text, gold, mode="lenient") == answer


@pytest.mark.parametrize(
    "text",
    ["<answer>\\boxed{3}</answer> The answer is 4.", "\\boxed{3} then the answer is 4", "The answer is 4. \\boxed{3}"],
)
def test_a_box_wins_over_free_text(text: str) -> None:
    assert final_answer(text, mode="lenient") == extract_answer(text) == "3"


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        final_answer("\\boxed{1}", mode="loose")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        score("\\boxed{1}", "1", mode="loose")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        Grader(mode="loose")  # type: ignore[arg-type]


def test_free_text_extraction_is_bounded_on_degenerate_responses() -> None:
    degenerate = ["\\[" * 100_000, "$" * 100_000, "answer is " * 50_000, "1, " * 100_000, "$$ x" * 50_000]
    degenerate += ["Question: x\n" * 50_000, "The answer is 1.\nUser: " * 50_000]  # prompts it wrote itself
    start = time.perf_counter()
    for text in degenerate:
        final_answer(text, "1, 2", mode="lenient")
    assert time.perf_counter() - start < 2.0


def test_a_value_far_behind_a_run_on_tail_is_no_answer() -> None:
    # gemma-2-9b-it on MATH (ZeroEval): a root, then pages of blank lines to the token limit
    start = "We multiply both by  √[5]{16⁴} = √[5]{65536}: \\n\\n"
    assert score(start + "   \\n" * 1500, "5", mode="lenient") == 0.0
    assert score("So the total is 42.\\n" + "   \\n" * 100, "42", mode="lenient") == 1.0  # a short tail


def test_a_response_that_loops_to_its_end_has_no_answer() -> None:
    # gemma-2-2b-it on GSM8K (ZeroEval), cut off by its token limit inside the loop
    loop = "Let's try 4 + 4 + 2 = 10.  This still doesn't add up to 19, so we need to adjust our thinking again.  "
    assert score("We need 19 stamps.  " + loop * 20 + loop[:40], "10", mode="lenient") == 0.0
    assert score("The answer is 10.  " * 20, "10", mode="lenient") == 1.0  # it said so, if over and over
    assert score(loop + "So 10 is too few: the answer is 19.", "19", mode="lenient") == 1.0
    # Yi-1.5-9B-Chat's loop on GSM8K ran 503 characters a turn
    turn = " ".join(f"Step {i}: P = {i} + 50, so P is {i + 50}." for i in range(20))
    assert len(turn) > 500 and score(turn * 3 + turn[:36], "50", mode="lenient") == 0.0


# Phi-3-mini-4k-instruct on MATH (ZeroEval): its JSON answer, then a prompt of its own
# making in the evaluation's template, which it goes on to answer or leaves as "___".
_TEMPLATE = (
    "\n\n## Instruction \n\nPlease answer this question by first reasoning and then providing your answer.\n"
    'Present your reasoning and solution in the following json format. \n```json\n{\n    "reasoning": "___",\n'
    '    "answer": "___"\n}\n```'
)
_REPLY = '```json\n{\n    "reasoning": "The product is $5 \\times (-3) = -15$.",\n    "answer": "-15"\n}\n```\n\n'


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        (_REPLY + "## Question: \n\nWhat is the sum of all integer x with |x - 3| < 10?" + _TEMPLATE, "-15"),
        (
            _REPLY
            + "## Question: \n\nWhat is 2 + 3?"
            + _TEMPLATE
            + '\n\n## Solution:\n{"reasoning": "", "answer": "5"}',
            "-15",
        ),
        # a base model's few-shot continuation (lm-evaluation-harness stops GSM8K at "Question:")
        (
            "She makes 9 * 2 = 18 dollars. The answer is 18.\n\nQuestion: Tom has 3 apples and buys 4. The answer is 7.",
            "18",
        ),
        (
            "Minerva's way: Final Answer: The final answer is $6$.\n\nProblem:\nFind $x$ if $2x = 8$. ... $\\boxed{4}$",
            "6",
        ),
        ("So the area is $\\boxed{32}$.\n\nUser: Thanks! Now what is half of it?\nAssistant: $\\boxed{16}$", "32"),
        # and in other languages
        ("所以答案是 $\\boxed{32}$。\n\n问题：求它的一半。\n答案是 $\\boxed{16}$。", "32"),
        ("Die Antwort ist $\\boxed{32}$.\n\nFrage 2: Was ist die Hälfte? $\\boxed{16}$", "32"),
        ("答えは $\\boxed{32}$ です。\nユーザー：その半分は？\n$\\boxed{16}$", "32"),
        (
            "She pays 3 * 4 = 12 dollars. The answer is 12.\nQuestion 2: A car goes 60 km/h for 2 h. The answer is 120.",
            "12",
        ),
        # a question restated after a value, but before any answer stated: no new prompt
        ("**Problem:** Restated, we want $n$ with $n^2 < 30$.\n\nWe check: $5^2 = 25$, so $\\boxed{5}$.", "5"),
        ("We found 3/8 before.\n\nQuestion: what is asked? Both red.\nSo it is $\\boxed{1/2}$.", "\\frac{1}{2}"),
        ("## Problem 1\n$\\boxed{3}$\n\n## Problem 2\n$\\boxed{5}$", "5"),  # a heading without a colon: a part
    ],
)
def test_an_answer_before_a_prompt_the_model_wrote_itself_is_its_answer(response: str, gold: str) -> None:
    assert score(response, gold, mode="lenient") == 1.0
    # strict mode, training's reward, keeps its format: the last box, wherever it stands
    assert final_answer(response, mode="strict") == extract_answer(response)


def test_a_reply_that_corrects_itself_is_read_at_its_correction() -> None:
    # yi-large-preview on GSM8K (ZeroEval): a JSON reply, then an apology and a new one
    first = '```json\n{"reasoning": "16 * 3 = 48", "answer": "234"}\n```\n\nApologies for the confusion. '
    assert score(first + 'Corrected:\n```json\n{"reasoning": "...", "answer": 366}\n```', "366", mode="lenient") == 1.0


def test_every_thinking_tag_holds_a_mark_the_quick_check_looks_for() -> None:
    # after_thinking looks for the tags only when one of these marks is in the text;
    # a tag added without a mark would be skipped in silence.
    from rstar2_async.reward._lenient import _THINKING, _THINKING_MARKS

    for begin, end in _THINKING:
        for tag in (begin, end):
            assert any(mark in tag for mark in _THINKING_MARKS), tag


@pytest.mark.parametrize("think", [True, False])
@pytest.mark.parametrize("box", [True, False])
def test_a_long_response_is_read_at_its_end(think: bool, box: bool) -> None:
    # 60K characters of MATH problems (LaTeX, dollars, numbers) before the answer, as
    # benchmarks/grader_long.py builds them; there it is timed against math-verify.
    data = Path(__file__).resolve().parents[3] / "shared" / "data" / "train_math.jsonl"
    with data.open() as f:
        body = "\n\n".join(json.loads(line)["problem"] for line, _ in zip(f, range(400), strict=False))[:60_000]
    answer = "\\boxed{42}." if box else "$42$."
    text = (
        f"<think>{body}</think>\n\nThe final answer is {answer}" if think else f"{body}\n\nThe final answer is {answer}"
    )
    assert (score(text, "42", mode="strict"), score(text, "42", mode="lenient")) == (1.0 if box else 0.0, 1.0)


@pytest.mark.parametrize(
    ("response", "gold", "strict", "lenient"),
    [
        ("The answer is 42.", "42", 0.0, 1.0),
        ("<answer>42</answer>", "42", 0.0, 1.0),
        ("Answer: $\\dfrac{14}{3}$", "\\frac{14}{3}", 0.0, 1.0),
        ("The answer is $\\pi/2$.", "\\frac{\\pi}{2}", 0.0, 1.0),  # math-verify settles it
        ("The answer is 7, not 42.", "42", 0.0, 0.0),
        ("<answer>\\boxed{42}</answer>", "42", 1.0, 1.0),
        ("$$3x + 2 = 11$$", "11", 0.0, 0.0),  # an unsolved equation answers nothing
        ("<answer>\\boxed{3x + 2 = 11}</answer>", "11", 0.0, 0.0),
        ("<answer>\\boxed{x = 11}</answer>", "11", 1.0, 1.0),
        # the gold text itself, whatever it holds: boxed in both modes, bare in lenient
        ("odd $n$", "odd $n$", 0.0, 1.0),
        ("\\boxed{odd $n$}", "odd $n$", 1.0, 1.0),
        ("\\boxed{even $n$}", "odd $n$", 0.0, 0.0),
        # an answer block without a box, in LaTeX; the last block counts
        ("<answer>\\frac{1}{2}</answer>", "\\boxed{\\frac{1}{2}}", 0.0, 1.0),
        ("<answer>1</answer> no, <answer>\\frac{1}{3}</answer>", "\\frac{1}{3}", 0.0, 1.0),
        ("<answer>\\frac{1}{3}</answer> no, <answer>1</answer>", "\\frac{1}{3}", 0.0, 0.0),
        # a matrix longer than a bare answer's usual line; Python's power; bold in a box
        (
            "\\begin{pmatrix} 1/\\sqrt{2} & 1/\\sqrt{2} \\\\ -1/\\sqrt{2} & 1/\\sqrt{2} \\end{pmatrix}",
            "\\begin{pmatrix}1/\\sqrt2&1/\\sqrt2\\\\-1/\\sqrt2&1/\\sqrt2\\end{pmatrix}",
            0.0,
            1.0,
        ),
        ("\\boxed{\\sqrt{\\sqrt{2}}}", "2**(1/4)", 1.0, 1.0),
        # Python's math names, in text with no LaTeX command
        ("\\boxed{2*pi}", "2\\pi", 1.0, 1.0),
        ("\\boxed{(3*sqrt(5))/7}", "\\frac{3\\sqrt{5}}{7}", 1.0, 1.0),
        ("\\boxed{sqrt(sqrt(2))}", "2**(1/4)", 1.0, 1.0),
        ("\\boxed{math.comb(10, 3)}", "120", 1.0, 1.0),
        ("\\boxed{comb(10, 3)}", "\\binom{10}{3}", 1.0, 1.0),
        ("\\boxed{factorial(n+1)}", "(n+1)!", 1.0, 1.0),
        ("\\boxed{Rational(1, 3)}", "\\frac{1}{3}", 1.0, 1.0),
        ("\\boxed{np.sqrt(3)/2}", "\\frac{\\sqrt{3}}{2}", 1.0, 1.0),
        ("The answer is math.sqrt(2).", "\\sqrt{2}", 0.0, 1.0),
        ("\\boxed{comb(10, 4)}", "120", 0.0, 0.0),
        ("\\boxed{log(2)}", "\\ln 2", 1.0, 1.0),  # Python's log is the natural one
        ("\\boxed{exp(2)}", "e^2", 1.0, 1.0),
        ("The answer is -1 + sqrt(2).", "\\sqrt{2} - 1", 0.0, 1.0),
        ("\\boxed{2*pi}", "\\pi", 0.0, 0.0),
        ("\\boxed{\\sqrt{\\sqrt{3}}}", "2**(1/4)", 0.0, 0.0),
        ("\\boxed{**3**}", "3", 1.0, 1.0),
        # a decimal within 1e-4 of a gold that is no integer: lenient only (the field's math_equal)
        ("\\boxed{1.4142}", "\\sqrt{2}", 0.0, 1.0),  # math-verify refuses it; the worker's tolerance takes it
        ("\\boxed{3.1416}", "\\pi", 0.0, 1.0),
        ("\\boxed{\\sqrt{2}}", "1.4142", 0.0, 1.0),
        ("\\boxed{4^{20}}", "1.09951162778E+12", 0.0, 1.0),  # a gold rounded in e-notation
        ("\\boxed{4^{20}}", "1.1E+12", 0.0, 0.0),
        ("\\boxed{3.14}", "\\pi", 0.0, 0.0),
        ("\\boxed{\\frac{355}{113}}", "\\pi", 0.0, 0.0),  # a fraction is no approximation
        ("\\boxed{4.0001}", "\\sqrt{16}", 0.0, 0.0),  # an integer gold needs the integer
        ("\\boxed{1.4142}", "x\\sqrt{2}", 0.0, 0.0),
        ("\\boxed{1.5}", "\\infty", 0.0, 0.0),  # infinity is within any tolerance of itself only
        ("\\boxed{-\\infty}", "-2.5", 0.0, 0.0),
        # alternatives in one box are no chain of equations: `p = -1 or p = 15/8` is not 15/8
        ("\\boxed{p = -1 \\text{ or } p = \\frac{15}{8}}", "p=-1,p=\\frac{15}{8}", 1.0, 1.0),
        ("\\boxed{p = -1 \\text{ or } p = \\frac{15}{8}}", "\\frac{15}{8}", 0.0, 0.0),
        ("\\boxed{x = 1 \\text{ or } x = 2}", "1, 2", 1.0, 1.0),
        # a hedge never pays for one value, though math-verify reads its last alternative
        ("\\boxed{x = 1 \\text{ or } x = 2}", "2", 0.0, 0.0),
        ("\\boxed{1 \\lor 2}", "2", 0.0, 0.0),
        ("\\boxed{x=1 \\vee x=2}", "2", 0.0, 0.0),
        ("\\boxed{x=1 \\quad x=2}", "2", 0.0, 0.0),
        ("\\boxed{1 \\mid 2}", "2", 0.0, 0.0),
        ("\\boxed{1 \\,|\\, 2}", "2", 0.0, 0.0),
        ("\\boxed{|-2|}", "2", 1.0, 1.0),  # two bars: an absolute value
        ("\\boxed{3 \\& 2}", "2", 0.0, 0.0),
        ("\\boxed{2\\text{?}}", "2", 0.0, 0.0),  # a guess
        ("\\boxed{3 = 2}", "2", 0.0, 0.0),  # a false equation states no value
        ("\\boxed{1 = 2 = 2}", "2", 0.0, 0.0),
        ("\\boxed{2 = 2.0}", "2", 1.0, 1.0),
        ("\\boxed{\\frac{1}{3} = \\frac{1}{2}}", "\\frac{1}{2}", 0.0, 0.0),
        ("\\boxed{\\frac{2}{4} = \\frac{1}{2}}", "\\frac{1}{2}", 1.0, 1.0),
        # nor do arrows, which math-verify reads past to their right side
        ("\\boxed{1 \\implies 2}", "2", 0.0, 0.0),
        ("\\boxed{1 \\to 2}", "2", 0.0, 0.0),
        ("\\boxed{\\frac{2}{3} \\approx 0.7}", "\\frac{2}{3}", 1.0, 1.0),  # a rounding, however coarse
        # a box that opens with "≈" states its value, as one opening with "x ≈" does
        ("\\boxed{\\approx 268}", "268", 1.0, 1.0),
        ("\\boxed{x \\approx 268}", "268", 1.0, 1.0),
        ("\\boxed{≈ 268}", "268", 1.0, 1.0),
        ("\\boxed{\\sim 268}", "268", 1.0, 1.0),
        ("\\boxed{\\approx 270}", "268", 0.0, 0.0),
        ("\\boxed{\\approx 268.08}", "268.083", 0.0, 1.0),  # the lenient tolerance, as for 268.08
        ("\\boxed{\\approx 0.33}", "\\frac13", 0.0, 0.0),  # too coarse for it
        ("\\boxed{\\similar 268}", "268", 0.0, 0.0),  # no relation
        # a short word after a number is a unit only if it is one; else variables multiplied
        ("\\boxed{4bc}", "4ab", 0.0, 0.0),
        ("\\boxed{2xy}", "2", 0.0, 0.0),
        ("\\boxed{3abc}", "3", 0.0, 0.0),
        ("\\boxed{5 cm}", "5", 1.0, 1.0),
        ("\\boxed{60 mph}", "60", 1.0, 1.0),
        ("\\boxed{12 apples}", "12", 1.0, 1.0),
        ("\\boxed{10m}", "10", 1.0, 1.0),  # one letter: a unit after a lone number only
        ("\\boxed{1 + 2t}", "3", 0.0, 0.0),  # math-verify reads `1 + 2` (t for tonnes)
        ("\\boxed{\\frac{1}{2}h}", "\\frac12", 0.0, 0.0),
        ("\\boxed{12 + 10t}", "10t + 12", 1.0, 1.0),
        # a fraction written short, which math-verify reads as `\frac{\}{p}i 2`, that is 2
        ("\\boxed{2}", "\\frac\\pi 2", 0.0, 0.0),
        ("\\boxed{\\frac\\pi 2 + 2007}", "2007 + \\frac\\pi 2", 1.0, 1.0),
        # a gold that states a value with no unknown reads as it, as an answer does
        ("\\boxed{\\displaystyle 0.56 = 56\\%}", "0.56 = 56\\%", 1.0, 1.0),
        ("\\boxed{56\\%}", "0.56 = 56\\%", 1.0, 1.0),
        ("\\boxed{11a+c}", "7 = 11a+c", 0.0, 0.0),  # an equation in unknowns stays whole
        ("\\boxed{x}", "2=x", 0.0, 0.0),
        ("\\boxed{17 \\equiv 2}", "2", 1.0, 1.0),  # a remainder
        # digits apart that are no thousands groups are no clear number (math-verify reads 2 3 as 5)
        ("\\boxed{2 3}", "23", 0.0, 0.0),
        ("\\boxed{2 3}", "5", 0.0, 0.0),
        ("\\boxed{1\\,000}", "1000", 1.0, 1.0),
        ("\\boxed{2^6 3^5}", "2^6 \\cdot 3^5", 1.0, 1.0),
        ("\\boxed{1 \\text{ (or } 2)}", "2", 0.0, 0.0),
        ("\\boxed{x = 1 \\\\ x = 2}", "2", 0.0, 0.0),
        ("\\boxed{(1, 2) \\text{ or } (2, 1)}", "(1, 2)", 0.0, 0.0),
        ("\\boxed{1, 2, \\ldots, 10}", "10", 0.0, 0.0),  # a sequence is many values
        ("\\boxed{\\begin{cases} 1 \\\\ 2 \\end{cases}}", "2", 0.0, 0.0),
        ("\\boxed{1, 2, \\ldots, 10}", "1, 2, \\ldots, 10", 1.0, 1.0),
        ("The answer is 5 or 6.", "5", 0.0, 0.0),  # a hedge in prose
        ("The answer is 5 or 6.", "5, 6", 0.0, 1.0),
        # nor a value taken back or bounded by its words, which math-verify ignores
        ("\\boxed{2 \\text{ (wrong)}}", "2", 0.0, 0.0),
        ("\\boxed{2 \\text{ is not the answer}}", "2", 0.0, 0.0),
        ("\\boxed{x = 2 \\text{ is wrong}}", "2", 0.0, 0.0),
        ("\\boxed{2 \\text{ (maybe)}}", "2", 0.0, 0.0),
        ("\\boxed{\\text{at least } 2}", "2", 0.0, 0.0),
        ("\\boxed{\\text{between } 2 \\text{ and } 3}", "2", 0.0, 0.0),
        ("\\boxed{\\text{up to } 2}", "2", 0.0, 0.0),
        ("\\boxed{2 \\text{ or more}}", "2", 0.0, 0.0),
        ("\\boxed{\\ge 2}", "2", 0.0, 0.0),
        ("\\boxed{\\neg 2}", "2", 0.0, 0.0),
        ("\\boxed{\\ge 2}", "\\ge 2", 1.0, 1.0),
        ("\\boxed{5 \\text{ more minutes}}", "5", 1.0, 1.0),  # a unit, not a bound
        ("\\boxed{\\text{No}}", "\\text{no}", 1.0, 1.0),
        ("\\boxed{x \\not= 5}", "x \\neq 5", 1.0, 1.0),  # `\not` is a command, not the word
        ("\\boxed{\\;\\angle APC = 74^\\circ\\;}", "74^\\circ", 1.0, 1.0),  # `\;` is a space
        ("\\boxed{x \\\\le 2}", "x \\le 2", 1.0, 1.0),  # `\\le` is `\le` escaped twice
        # a reasoning model's answer is after its last </think>
        ("<think>Maybe \\boxed{5}? No, recount: 6.</think>\n\nThe answer is 6.", "6", 0.0, 1.0),
        ("<think>Maybe \\boxed{5}? No, recount: 6.</think>\n\nThe answer is 6.", "5", 0.0, 0.0),
        ("<think>Maybe 5. Recount: 6.</think>\n\nThe answer is \\boxed{6}.", "6", 1.0, 1.0),
        ("Let me count: 6.</think>\n\n\\boxed{6}", "6", 1.0, 1.0),  # the template opened it
        ("<think>So it is \\boxed{6}", "6", 0.0, 0.0),  # cut off while thinking
        # Sky-T1 and OpenThinker mark their thinking otherwise, with what look like special tokens
        (
            "<|begin_of_thought|>\\boxed{5}? No.<|end_of_thought|><|begin_of_solution|>\\boxed{6}<|end_of_solution|>",
            "6",
            1.0,
            1.0,
        ),
        (
            "<|begin_of_thought|>\\boxed{5}? No.<|end_of_thought|><|begin_of_solution|>\\boxed{6}<|end_of_solution|>",
            "5",
            0.0,
            0.0,
        ),
        ("<|begin_of_thought|>So it is \\boxed{5}", "5", 0.0, 0.0),
        (
            "<|channel|>analysis<|message|>Maybe \\boxed{5}.<|end|><|start|>assistant<|channel|>final<|message|>\\boxed{6}",
            "6",
            1.0,
            1.0,
        ),
        (
            "<|channel|>analysis<|message|>Maybe \\boxed{5}.<|end|><|start|>assistant<|channel|>final<|message|>\\boxed{6}",
            "5",
            0.0,
            0.0,
        ),
        ("<|channel|>analysis<|message|>So it is \\boxed{5}", "5", 0.0, 0.0),
        ("Hence the answer is\n$$\n\\$32,\\!348\n$$", "\\$32,\\!348", 0.0, 1.0),  # an escaped dollar in display math
        # a box that lost its backslash: lenient only
        ("So the answer is boxed{42}.", "42", 0.0, 1.0),
        ("So the answer is fbox{42}.", "42", 0.0, 1.0),
        # a lone number with words or arrows around it, which math-verify reads only by its fallback
        ("So 7.", "7", 0.0, 1.0),
        ("I think 7.", "7", 0.0, 1.0),
        ("i.e. 7", "7", 0.0, 1.0),
        ("-> 7", "7", 0.0, 1.0),
        ("pi 3", "3", 0.0, 0.0),  # 3π, not a label
        ('{"reasoning": "7 boxes a day for 2 days.", "answer": "14 boxes"}', "# 14", 0.0, 1.0),  # GSM8K's "#"
        # an answer field or block that holds words only is the answer, not the text around it
        ('{"reasoning": "There are infinitely many multiples of 12.", "answer": "infinitely many"}', "12", 0.0, 0.0),
        ("There are infinitely many multiples of 12.\n<answer>infinitely many</answer>", "12", 0.0, 0.0),
        ('{"reasoning": "Solve for b, then a + b = 12.", "answer": " "}', "12", 0.0, 0.0),  # no answer given
        ("So it is 12.\n<answer></answer>", "12", 0.0, 1.0),  # an empty block: the text is read
        # a gold of a value and prose: the value alone, or other words, is not the answer
        ("\\boxed{1}", "1 and odd prime numbers", 0.0, 0.0),
        ("\\boxed{1 and even numbers}", "1 and odd prime numbers", 0.0, 0.0),
        ("\\boxed{1 \\text{ and odd prime numbers}}", "1 and odd prime numbers", 1.0, 1.0),
        ("\\boxed{3, 5}", "3 \\text{ and } 5", 1.0, 1.0),
        ("\\boxed{x = 1, y = 2}", "x = 1 \\text{ and } y = 2", 1.0, 1.0),
        ("So \\fbox{42}, not \\textfbox{5}.", "42", 1.0, 1.0),  # a longer name is no box
        ("Maybe boxed{5}; no, \\boxed{42}.", "5", 0.0, 0.0),
        # LaTeX from a string literal that did not escape its backslashes
        ("The answer is $\x0crac{1}{2}$.", "\\frac{1}{2}", 0.0, 1.0),
        ("\x08oxed{5}", "5", 1.0, 1.0),
        ("\\boxed{13}", "\text{13}", 1.0, 1.0),
        ("\\boxed{x \neq 2}", "x \\neq 2", 1.0, 1.0),
        ("\\boxed{x \neq 2}", "x = 2", 0.0, 0.0),
        ("We get\ne^{x}, so \\boxed{e^x}", "e^x", 1.0, 1.0),  # a line may start with e
        ("\\boxed{\\left(1, 2\right)}", "(1, 2)", 1.0, 1.0),
        # other families' tags: Magistral, Seed-OSS, Kimi, Command A, EXAONE Deep
        ("[THINK]Maybe \\boxed{5}.[/THINK]The answer is \\boxed{6}.", "5", 0.0, 0.0),
        ("[THINK]Maybe \\boxed{5}.[/THINK]The answer is \\boxed{6}.", "6", 1.0, 1.0),
        ("<seed:think>Maybe \\boxed{5}.</seed:think>So \\boxed{6}.", "5", 0.0, 0.0),
        ("\u25c1think\u25b7Maybe \\boxed{5}.\u25c1/think\u25b7So \\boxed{6}.", "6", 1.0, 1.0),
        ("\u25c1think\u25b7So it is \\boxed{5}.", "5", 0.0, 0.0),
        (
            "<|START_THINKING|>Maybe \\boxed{5}.<|END_THINKING|><|START_RESPONSE|>The answer is 6.<|END_RESPONSE|>",
            "6",
            0.0,
            1.0,
        ),
        ("<thought>Maybe \\boxed{5}.</thought>\\boxed{6}", "5", 0.0, 0.0),
        # gpt-oss decoded without its special tokens: the channels' names run into the text
        ("analysisMaybe \\boxed{5}. No: 6.assistantfinalThe answer is \\boxed{6}.", "6", 1.0, 1.0),
        ("analysisMaybe \\boxed{5}. No: 6.assistantfinalThe answer is \\boxed{6}.", "5", 0.0, 0.0),
        ("analysisWe need x. It is \\boxed{5}", "5", 0.0, 0.0),  # cut off while thinking
        ("analysis: it is \\boxed{5}.", "5", 1.0, 1.0),  # the word, not the channel
        ("<think>a</think> \\boxed{5}, calling a tool. <think>recheck</think> \\boxed{6}", "6", 1.0, 1.0),
        # numbers as people write them, and a vector as a tuple: lenient only
        ("The answer is five.", "5", 0.0, 1.0),
        ("\\boxed{\\text{twelve}}", "12", 0.0, 1.0),
        ("There are five ways.", "5", 0.0, 0.0),  # an unanchored word is no answer
        ("\\boxed{1.5e3}", "1500", 0.0, 1.0),
        ("The limit is \\boxed{\\text{infinity}}.", "\\infty", 0.0, 1.0),
        ("\\boxed{(1, 2, 3)}", "\\begin{pmatrix} 1 \\\\ 2 \\\\ 3 \\end{pmatrix}", 0.0, 1.0),
        ("\\boxed{\\langle 1, 2, 3 \\rangle}", "(1, 2, 3)", 1.0, 1.0),
        ("The center is at (1, -2).", "(1,-2)", 0.0, 1.0),
        ("$x = \\boxed{2}$ and $y = \\boxed{3}$", "(2, 3)", 0.0, 1.0),  # strict reads the last box
        ("$x = \\boxed{3}$ and $y = \\boxed{2}$", "(2, 3)", 0.0, 0.0),
        # rounded entries of a tuple, list, matrix or interval: lenient only, entry by entry
        ("\\boxed{(3, 1.5708)}", "(3, \\frac{\\pi}{2})", 0.0, 1.0),
        ("\\boxed{1/3, 1.732, 3.1416}", "\\frac13, \\sqrt3, \\pi", 0.0, 1.0),
        (
            "\\boxed{\\begin{pmatrix} 1.4142 \\\\ 0.5 \\end{pmatrix}}",
            "\\begin{pmatrix} \\sqrt2 \\\\ \\frac12 \\end{pmatrix}",
            0.0,
            1.0,
        ),
        ("\\boxed{(1.4142, 2)}", "(\\sqrt{2}, 2)", 0.0, 1.0),
        ("\\boxed{(1.4, 2)}", "(\\sqrt{2}, 2)", 0.0, 0.0),  # 1e-2 off
        ("\\boxed{(1.4142, 2.0001)}", "(\\sqrt{2}, 2)", 0.0, 0.0),  # an integer entry is exact
        ("\\boxed{[1.4142, 2)}", "(\\sqrt{2}, 2)", 0.0, 0.0),  # an interval keeps its brackets
        ("\\boxed{[1, \\infty)}", "[2^{\\frac{1}{2^{1000}}}, \\infty)", 0.0, 0.0),  # no decimal: exact
        # an expression with a decimal constant: lenient only, as a function at sample points
        ("\\boxed{\\frac{23 - x}{54}}", "0.333333+(-0.0185185)*(x-5)", 0.0, 1.0),
        ("\\boxed{4 e^{\\cosh(4x)} \\sinh(4x)}", "2.71828182845905^{cosh(4*x)} * sinh(4*x) * 4", 0.0, 1.0),
        ("\\boxed{\\pi r^2}", "3.14159 r^2", 0.0, 1.0),
        ("\\boxed{\\pi r^2}", "3.14 r^2", 0.0, 0.0),  # 5e-4 off
        ("\\boxed{\\frac{24 - x}{54}}", "0.333333+(-0.0185185)*(x-5)", 0.0, 0.0),
        ("\\boxed{\\pi t^2}", "3.14159 r^2", 0.0, 0.0),  # another variable
        ("\\boxed{\\frac{3y}{2} + 2x}", "1.5x + 2y", 0.0, 0.0),
        # a gold's empty root before its radicand, read so by math-verify too
        ("\\boxed{\\frac{3}{\\sqrt{3}}}", "\\sqrt{}{3}", 1.0, 1.0),
        ("\\boxed{1.7320}", "\\sqrt{}{3}", 0.0, 1.0),
        ("\\boxed{\\sqrt{2}}", "\\sqrt{}{3}", 0.0, 0.0),
        # a percent written as a word in text
        ("\\boxed{\\frac{1}{2}\\text{ percent}}", "0.005", 1.0, 1.0),
        # complex numbers: i is the imaginary unit (math-verify reads it as a variable)
        ("\\boxed{i(2-i)}", "1+2i", 1.0, 1.0),
        ("\\boxed{i^5}", "i", 1.0, 1.0),
        ("\\boxed{(1+i)(1-i)}", "2", 1.0, 1.0),
        ("\\boxed{1+2j}", "1+2i", 1.0, 1.0),  # Python's j
        ("\\boxed{e^{i\\pi/3}}", "\\frac12+\\frac{\\sqrt3}{2}i", 1.0, 1.0),
        ("\\boxed{2+i}", "1+2i", 0.0, 0.0),
        ("\\boxed{0.333i}", "\\frac13 i", 0.0, 0.0),
        # an equation's function is part of the answer
        ("\\boxed{\\cos(x) = \\frac{42}{59}}", "\\sin(x) = \\frac{42}{59}", 0.0, 0.0),
        ("\\boxed{\\sin x = \\frac{1}{2}}", "\\sin(x) = \\frac{1}{2}", 1.0, 1.0),
        # a decimal exponent is the exact fraction it is written as
        ("\\boxed{2^{1.5}}", "2\\sqrt{2}", 1.0, 1.0),
        ("\\boxed{2\\sqrt{2}}", "2^{1.5}", 1.0, 1.0),
        ("\\boxed{2^{0.33}}", "2^{1/3}", 0.0, 0.0),
        ("\\boxed{2^{1.5}}", "2.8284", 0.0, 1.0),  # the gold rounded: lenient's tolerance
        # sets by their condition, absolute values, no solution; a bar is no alternative there
        ("\\boxed{\\{x \\mid x > 2\\}}", "x > 2", 1.0, 1.0),
        ("\\boxed{x < -8 \\text{ or } x > 8}", "|x| > 8", 1.0, 1.0),
        ("\\boxed{y < -8 \\text{ or } y > 8}", "|x| > 8", 0.0, 0.0),
        ("\\boxed{\\text{no solution}}", "\\emptyset", 1.0, 1.0),
        ("\\boxed{\\text{no, 2}}", "2", 0.0, 0.0),
        ("\\beginboxed{8\\sqrt{6}}", "8\\sqrt{6}", 0.0, 1.0),  # lenient reads a box glued to \\begin
        ("The answer is greater than 42.", "42", 0.0, 0.0),
        ("The answer is 5 minutes.", "5 \\text{ hours}", 0.0, 0.0),  # another unit, in prose too
        ("The answer is 5 hours.", "5 \\text{ hours}", 0.0, 1.0),
        ("The answer is 5 hours.", "5", 0.0, 1.0),
        ("It takes 3 hours.", "3 \\text{ minutes}", 0.0, 0.0),  # the last value's unit too
        ("It takes 3 hours.", "3", 0.0, 1.0),
        ("The answer is at least 42.", "\\text{at least } 42", 0.0, 1.0),
        # yi-large-preview on GSM8K (ZeroEval): a JSON answer field quoted twice
        ('{"answer": "\\"€1500 - €1423 = €77\\""}', "77", 0.0, 1.0),
        # a JSON answer escaped as JSON is unescaped; raw LaTeX in one keeps its backslashes
        ('{"answer": "10,\\\\!080"}', "10,\\!080", 0.0, 1.0),
        ('{"answer": "\\\\frac{\\u03c0}{2}"}', "\\frac{\\pi}{2}", 0.0, 1.0),
        ('{"answer": "\\frac{1}{2}"}', "\\frac12", 0.0, 1.0),  # not a form feed
        (
            '{"answer": "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"}',
            "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
            0.0,
            1.0,
        ),
        # a gold written as inline or display math is the math inside
        ("\\boxed{10,\\!080}", "\\(10,\\!080\\)", 1.0, 1.0),
        ("\\boxed{90^\\circ}", "\\[90^\\circ\\]", 1.0, 1.0),
        ("\\boxed{10,\\!081}", "\\(10,\\!080\\)", 0.0, 0.0),
        ("\\boxed{1, 2}", "\\(1\\) and \\(2\\)", 1.0, 1.0),
        ("\\boxed{\\text{(E)},}", "$\\text{(E)},$", 1.0, 1.0),  # the gold's stop inside its dollars
        ("\\boxed{10}", "$$10$$", 1.0, 1.0),
        ("\\boxed{0.56=56\\%}", "\\boxed{0.56 = 56\\%}", 1.0, 1.0),  # a boxed gold states its value too
        # a JSON answer of math alone is read whole, as a box's is, not searched for a number
        ('{"answer": "AB=9, CD=4"}', "AB=9, CD=4", 0.0, 1.0),
        ('{"answer": "164 \\\\pi \\\\mbox{ square feet}"}', "164 \\pi", 0.0, 1.0),
        ('{"answer": "[1, 2) \\\\cup (3, 4]"}', "[1,2) \\cup (3,4]", 0.0, 1.0),
        ('{"answer": "The answer is 5."}', "5", 0.0, 1.0),  # prose in it is still read
        # a style command only sizes what follows, in a JSON answer too
        (
            '{"answer": "\\\\displaystyle \\\\begin{pmatrix} -4 \\\\\\\\ 0 \\\\end{pmatrix}"}',
            "\\begin{pmatrix} -4 \\\\ 0 \\end{pmatrix}",
            0.0,
            1.0,
        ),
        ("\\boxed{\\displaystyle \\frac{1}{2}}", "\\frac12", 1.0, 1.0),
        # a time of day, read whole (not its minutes) and on the 24-hour clock
        ("Jordan can start at 2:00 pm at the latest.", "2", 0.0, 1.0),  # GSM8K's gold for it
        ("They arrive at 4:30 p.m.", "\\text{4:30 p.m.}", 0.0, 1.0),
        ("\\boxed{4:30 \\text{ p.m.}}", "\\text{4:30 p.m.}", 1.0, 1.0),
        ("They arrive at 4:30 a.m.", "\\text{4:30 p.m.}", 0.0, 0.0),
        # the final answer stated after boxed steps (Minerva's format) is the answer
        ("First \\boxed{12}, then \\boxed{30}. Final Answer: The final answer is $42$.", "42", 0.0, 1.0),
        ("First \\boxed{12}, then \\boxed{30}. Final Answer: The final answer is $42$.", "30", 1.0, 0.0),
        ("So \\boxed{30}. The final answer is the one above.", "30", 1.0, 1.0),
        ("So \\boxed{5}. Let me double-check the final answer: 5 + 3 = 8.", "5", 1.0, 1.0),  # no statement
        # a gold phrase that labels its boxes is all of them; a worked solution its last
        ("\\boxed{3, 4}", "\\boxed{3} cats and \\boxed{4} dogs", 1.0, 1.0),
        ("\\boxed{4}", "\\boxed{3} cats and \\boxed{4} dogs", 0.0, 0.0),
        ("\\boxed{9}", "We first get \\boxed{5}. Then the total is \\boxed{9}.", 1.0, 1.0),
        # an `=` in a subscript or bound ends no side; a name whose subscript sets a variable has a value
        ("\\boxed{S_{n=5} = 15}", "15", 1.0, 1.0),
        ("\\boxed{\\sum_{k=1}^{10} k = 55}", "55", 1.0, 1.0),
        # a letter after a number is a unit only if it is one: an upright `i` or `x` is none
        ("\\boxed{3\\mathrm{i}}", "3", 0.0, 0.0),
        ("\\boxed{5\\mathrm{x}}", "5", 0.0, 0.0),
        ("\\boxed{6 - 5\\mathrm{i}}", "6-5i", 1.0, 1.0),
        ("\\boxed{5\\text{ m}}", "5", 1.0, 1.0),
        ("\\boxed{864 \\text{ in}^2}", "864", 1.0, 1.0),
        # bold type around the whole answer; roots in Unicode; Python's pi after a number
        ("\\boxed{\\mathbf{34\\text{ sq. units}}}", "34", 1.0, 1.0),
        ("\\boxed{\\mathbf{0.56 = 56\\%}}", "0.56 = 56\\%", 1.0, 1.0),
        ("\\boxed{3√13}", "3\\sqrt{13}", 1.0, 1.0),
        ("\\boxed{∛(2x)}", "\\sqrt[3]{2x}", 1.0, 1.0),
        ("\\boxed{√12}", "\\sqrt{13}", 0.0, 0.0),
        # fractions and powers in Unicode
        ("\\boxed{2½}", "\\frac{5}{2}", 1.0, 1.0),
        ("The answer is ¾.", "0.75", 0.0, 1.0),
        ("\\boxed{10⁶}", "1000000", 1.0, 1.0),
        ("\\boxed{10⁶}", "10^5", 0.0, 0.0),
        ("The answer is 2³ = 8.", "8", 0.0, 1.0),
        ("\\boxed{x⁻¹}", "\\frac{1}{x}", 1.0, 1.0),
        ("\\boxed{5 \\text{ cm}²}", "5 \\text{ cm}^2", 1.0, 1.0),
        ("\\boxed{5 \\text{ cm}²}", "5 \\text{ cm}", 0.0, 0.0),
        ("\\boxed{7pi}", "7\\pi", 1.0, 1.0),
        ("The final answer is $2sqrt(5)$.", "2\\sqrt{5}", 0.0, 1.0),
        # a scale word is no unit: `5 million` is 5000000, not 5
        ("\\boxed{5 \\text{ million}}", "5000000", 1.0, 1.0),
        ("\\boxed{5 \\text{ million}}", "5", 0.0, 0.0),
        ("\\boxed{2.5 \\text{ billion dollars}}", "2500000000", 1.0, 1.0),
        ("The answer is 3 dozen.", "36", 0.0, 1.0),
        ("So the total is 5 million people.", "5", 0.0, 0.0),
    ],
)
def test_score_in_both_modes(response: str, gold: str, strict: float, lenient: float) -> None:
    assert score(response, gold) == strict  # strict is the default
    assert (score(response, gold, mode="strict"), score(response, gold, mode="lenient")) == (strict, lenient)


@pytest.mark.anyio
async def test_grader_grades_in_its_mode() -> None:
    async with Grader(workers=1, timeout=5.0) as strict, Grader(workers=1, timeout=5.0, mode="lenient") as lenient:
        for grader, expected in ((strict, 0.0), (lenient, 1.0)):
            assert await grader.score("So the area is $\\pi/2$.", "\\frac{\\pi}{2}") == expected
            assert await grader.score("The answer is 1,000.", "1000") == expected
            assert await grader.score("The answer is 7, not 5.", "5") == 0.0
            assert await grader.score("\\boxed{2.8284}", "2\\sqrt{2}") == expected  # the worker's tolerance
        assert (lenient.statistics().graded, lenient.statistics().correct) == (4, 3)


@pytest.mark.parametrize(
    ("end", "text", "gold"),
    [
        ("<|im_end|>", "Janet sells 16 - 3 - 4 = 9 eggs.\n#### 540", "540"),
        ("<|eot_id|>", "So she earns 540 dollars. The answer is: 540", "540"),
        ("<|end_of_text|>", "Final Answer: The final answer is $540$. I hope it is correct.", "540"),
        ("</s>", "**Answer:** 540", "540"),
        ("<｜end▁of▁sentence｜>", "<answer>540</answer>", "540"),
        ("<|im_end|>", "<answer>\\boxed{540}</answer>", "540"),
        ("<|im_end|>", "The answer is 541", "540"),
    ],
)
def test_a_stored_sample_regrades_as_the_run_graded_it(end: str, text: str, gold: str) -> None:
    # The engine grades the model's text; the stored response_text keeps each turn's
    # end-of-turn token (and a tool turn's template between turns).
    stored = f"Let me compute.{end}\n<|im_start|>user\n<tool_response>\n9\n</tool_response>{end}\n<|im_start|>assistant\n{text}{end}"
    graded = f"Let me compute.\n{text}"
    for mode in ("strict", "lenient"):
        assert score(stored, gold, mode=mode) == score(graded, gold, mode=mode)  # type: ignore[arg-type]
    assert score(stored, gold, mode="lenient") == (gold in text and "541" not in text)


def test_a_stored_sample_from_the_real_chat_template_regrades_as_graded() -> None:
    # The transcript as the engine records it (_conversation.TokenConversation), with
    # the tiny Qwen2's real template: each turn decoded without its EOS, then eos_text.
    from transformers import AutoTokenizer

    from rstar2_async.demo import cached_tiny_model
    from rstar2_async.rollout import HFChatTokenizer

    model_dir = cached_tiny_model(Path("runs/cache"))
    tok, hf = HFChatTokenizer.from_pretrained(model_dir), AutoTokenizer.from_pretrained(str(model_dir))
    turns = ["Let me add. <tool_call>{}</tool_call>", "She sold 540.\n#### 540"]
    stored = ""
    for i, turn in enumerate(turns):
        ids = hf(turn, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        stored += tok.decode(ids[:-1]) + tok.eos_text
        if i == 0:
            stored += tok.tool_turn_text("<tool_response>\n540\n</tool_response>")
    assert tok.eos_text in stored
    assert score(stored, "540", mode="lenient") == score("\n".join(turns), "540", mode="lenient") == 1.0
