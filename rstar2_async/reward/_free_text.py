"""The final answer of a response written without a box (the lenient mode's reading).

In math-verify's order of preference (``math_verify.parse``'s default extraction):

1. the rightmost anchored answer: "final answer is ...", "the answer is ...",
   "Answer: ...", ``#### ...``, and the same in French, Spanish, Portuguese, Italian,
   German, Russian, Chinese, Japanese and Korean ("Réponse :", "答案是"), and "answer"
   and a colon in each other language of lighteval's multilingual extraction
   ("Odpowiedź:", "الإجابة:", "उत्तर:");
2. the whole response, when it is one short line of math (``x^2 + 2*x + 1``,
   ``\\frac{10}{9}``, ``1 000``): a bare final answer;
3. the rightmost LaTeX span (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``) or bare
   number, whichever ends last, unless the response runs on for `_RUN_ON_CHARS` after
   it.  Numbers end at ASCII letters only, so ``300分钟`` reads 300.  Before that,
   what follows the final value and only checks or restates it is cut ("Let me
   double-check: ...", ", which is approximately 0.1667", "(5 x 5)"), and plain
   values listed after the last sentence's copula are one list ("The solutions are 1
   and 2.").

A span or an answer that states a value (``\\lim_{x \\to 0} \\frac{\\sin x}{x} = 1``,
``e^{i\\pi} = -1``, ``3 + 4 = 7``) answers with its right side; an equation in an
unknown (``5x - 7y + 4 = 0``) stays whole.  An anchored sentence in prose ("Final
Answer: Jane started 3 hours ago") answers with what follows its last "is" (or
"=" outside math, "est", "是"), else its first span or number, as math-verify's lazy match after
"answer:" reads it ("Answer: she still owes $220 in 12 months" is 220).

It departs from math-verify's extraction where that would accept a wrong answer:
the text after an anchor ends at the sentence ("The answer is 7, not 5" reads 7), a
bound or hedge before its value stays with it ("at least 42", which the grader
refuses), values joined by "or" are read together ("The answer is 5 or 6" is ``5, 6``,
which one value does not equal; "5 hours and 30 minutes" is ``5, 30``), a unit after
the value stays with it ("5 minutes" is no ``5 \\text{ hours}``), an anchored sentence
or span that is a question ("Is the answer 5?", "Answer: $5$?") or starts with "not"
is skipped, a span or number right after "not" is never taken (nor after "nicht",
"не", "não", "non", "pas", "不是"; "5ではなく7" and "5가 아니라 7" answer 7), and a
``$...$`` span holding prose ("$5 and gets $") is currency, not math.  Pure functions
whose cost is bounded: free text is read in its last `TAIL_CHARS` characters.
"""

from __future__ import annotations

import re

from ._normalise import FUNCTION_COMMANDS, QUALIFIER, unwrap_box
from ._spans import (
    JOIN,
    MAX_JOINED,
    SPANS,
    TEXT,
    VALUE,
    first_value,
    joined,
    last_value,
    span_answer,
    span_bounds,
    statement_value,
    words,
)
from ._units import is_unit, stated_unit

__all__ = ["TAIL_CHARS", "anchored_answer", "free_text_answer"]

TAIL_CHARS = 8000
"""Free text is read in the response's last this many characters: the final answer
is at the end, and it bounds the cost of the span regexes on a runaway response
full of unclosed ``\\[``."""
_RUN_ON_CHARS = 2000
"""A value this far from the end of a response, with no other after it, is no final
answer: the response ran on (gemma-2-9b-it's 6,700 characters of blank lines after a
``√[5]{65536}``, read as 5)."""
_VALUE_MARK = re.compile(r"\d|\$|\\[(\[]")  # in every number and math span: a cheap look for one
# A parenthesis that opens with a LaTeX command: `\(...\)` whose backslashes were lost.
_LATEX_PAREN = re.compile(r"\s*\(\s*\\[a-zA-Z]")
_CONTINUED = re.compile(r"(?:\\[a-zA-Z]+|[-+*/=^,;<>(\[{])\s*$")  # what a value goes on after
_FACTOR = re.compile(r"\)\s*$")  # a group, which another one multiplies: `(2) (x+2)`
# An anchor, then the answer right after it.  `answer` must be followed by a verb or
# a colon, so "to answer this" anchors nothing.
_ANCHOR = re.compile(
    r"(?:\bfinal\s+answer\b(?:\s*\*\*)?\s*(?:is\b|:|=|\n)"
    r"|\banswer\b(?:\s*\*\*)?\s*(?:is\b|:|=|would\s+be\b|should\s+be\b|will\s+be\b|equals\b)"
    r"|\b(?:r[ée]ponse|respuesta|resposta|risposta|antwort|ответ)(?:\s+(?:finale?|final))?(?:\s*\*\*)?"
    r"\s*(?:est\b|es\b|ist\b|é\b|è\b|:|=)"
    r"|(?:最终答案|答案|答え|回答|정답|답)(?:\s*\*\*)?\s*(?:是|为|為|は|은|:|：|=)"
    # the other languages of lighteval's multilingual extraction, before a colon, with
    # one word between at most ("الإجابة النهائية:", "Odpowiedź końcowa:")
    r"|(?:\b(?:antwoord|cevap|erantzuna|javob|jawaban|jibu|odgovor|odpove[ďd]|odpověď|odpowied[źz]|r[ăa]spuns"
    r"|sagot|svar|tr[ảa]\s+l[ờo]i|tubag|vastaus|vastus|v[áa]lasz|απάντηση|адказ|валэктон|відповідь|одговор"
    r"|отговор|яуап|җавап|جواب|उत्तर|উত্তর|ਜਵਾਬ|જવાબ|பதில்|జవాబు)|(?:ال)?إجابة|คำตอบ)"
    r"(?:\s+[^\W\d_]+)?(?:\s*\*\*)?\s*[:：]"
    r"|^\s*####"
    r"|^\s*(?:\#{1,6}|\*\*)\s*(?:final\s+)?answer\s*:?\s*(?:\*\*)?\s*:?\s*$)"  # a heading line: "### Answer"
    r"[\s:：*=]*",
    re.IGNORECASE | re.MULTILINE,
)
# Values joined as alternatives or parts in prose, and the words that hedge them.
_ALTERNATIVES = re.compile(r"\s*(?:,?\s*\b(?:or|and)\b|,(?=\s))\s*", re.IGNORECASE)  # not `1,000`
_GROUPED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_COUNTED = re.compile(rf"({VALUE.pattern})(?:\s+[^\W\d_]+){{1,2}}")  # "5 hours", "2 red balls"
_HEDGE_WORDS = re.compile(r"\b(?:either|both|maybe|possibly|perhaps)\b", re.IGNORECASE)
# What may follow the final value without being it (`_without_afterword`).
_CHECK = re.compile(
    r"(?:^|(?<=[.!:]))\s*(?:\*\*)?(?:verification|verify|check(?:ing)?|sanity\s+check|double[- ]check"
    r"|let(?:'s|\s+us|\s+me)\s+(?:double[- ])?(?:check|verify))\b[^\n]*(?:\n[^\n]*){0,8}$",
    re.IGNORECASE | re.MULTILINE,
)
_APPROXIMATION = re.compile(
    r"(?:,\s*(?:which\s+is\s+|or\s+|i\.e\.,?\s*|that\s+is,?\s*)?(?:approximately|approx\.|about|roughly|around)"
    r"|\s*(?:≈|\\approx|~))\s*\$?[-+]?\.?\d[^\n]{0,40}$",
    re.IGNORECASE,
)
# Where an optimum is reached, after its value: ", attained at $x = 1$", " when t = 3".
_SETTING = r"\$?\s*[a-zA-Z](?:_\{?\w+\}?)?\s*=\s*[^\n=;,$]{1,30}?\s*\$?"
_ATTAINED = re.compile(
    r"(?:,\s*(?:which\s+(?:is\s+)?)?|\s+)"
    r"(?:(?:attained|achieved|reached|obtained|occurs|occurring|happens)\s+(?:at|when|for|if)|at|when|for)\s+"
    rf"{_SETTING}(?:\s*(?:,\s*(?:and\s+)?|and\s+){_SETTING}){{0,2}}\s*[.!]?\s*$",
    re.IGNORECASE,
)
_EXTREMUM = re.compile(
    r"\b(?:min|max)(?:imum|imal|imize[ds]?)?\b|\b(?:least|greatest|smallest|largest)\b", re.IGNORECASE
)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=\S)|\n")
_CONCLUSION = re.compile(
    r"\b(?:so|thus|therefore|hence|actually|instead|wrong|mistake|error|incorrect|correction|wait|but)\b",
    re.IGNORECASE,
)
_ASIDE = re.compile(r"\s+\([^()\n]{1,80}\)\s*[.!]?\s*$")
_QUESTION = re.compile(r"\s*[?？]")
_NOT = re.compile(r"\s*(?:(?:not|n't|nicht|не|não|non|pas)\b(?!-)|不是|并非)", re.IGNORECASE)  # not "non-zero"
# "X ではなく Y", "X 가 아니라 Y": not X but Y (the negation follows the value it takes back).
_NOT_BUT = re.compile(r"\s*(?:ではなく|じゃなく|[이가]?\s*아니라)\s*")
# Where the answer after an anchor ends: a line break, a full stop (not a decimal
# point), a semicolon (not LaTeX's space `\;`, nor one between values: `5; 6`), a comma
# before a word (not `CD=4`), an aside in parentheses, or a word that starts an explanation.
_ANSWER_END = re.compile(
    r"\n|\.(?!\w)|(?<!\\);(?!\s*(?:[(\[\d-]|[a-zA-Z]\s*=))|\?|。|；|？|，|而不是|而非|不是|(?<=\S)\s+\(|,\s*(?=(?-i:[a-z]{2}))"
    r"|\s(?:because|since|which|as|so|for|when|where|but|if|and\s+(?:so|thus|hence))\b",
    re.IGNORECASE,
)
# In an anchored sentence of prose, the value follows its last copula.
_COPULA = re.compile(r"(?:\s(?:is|are|equals|est|es|ist|é|è)\s|=|是|为|為)", re.IGNORECASE)
_MAX_WHOLE = 80
"""Longest response (characters) read whole as one bare answer, but for one LaTeX
environment (a matrix), which is read whole at any length."""
_ONE_ENVIRONMENT = re.compile(r"\\begin\{([a-zA-Z]+\*?)\}.*\\end\{\1\}")
# A one-word label before a bare answer: a word of two letters or more, then ":" or
# "=", or a number right after it ("Result: 42", "Total = 1,234", "Therefore 42.", "So 7.",
# "I think 7.").
_LABEL = re.compile(
    rf"(?:I\s+)?(?!(?:{FUNCTION_COMMANDS}|pi|sqrt)\b)[^\W\d_]{{2,}}(?:\s*(?::|=(?!=))\s*(?=\S)|,?\s+(?=[-+(]?\d))"
)  # not a function or constant: `pi 3`, `sin 30`


def free_text_answer(text: str) -> str | None:
    """The final answer of a response without a box: the rightmost anchored answer,
    else the whole response if it is a bare answer, else the rightmost math span or
    number.  None when there is none of them."""
    text = text[-TAIL_CHARS:]
    if answer := anchored_answer(text):
        return answer
    if whole := _bare_answer(text):
        return whole
    text = _without_afterword(text)
    if not _VALUE_MARK.search(text, max(0, len(text) - _RUN_ON_CHARS)) or _looping(text):
        return None  # the response ran on past its last value, or loops to its end
    if listed := _last_sentence_list(text):
        return listed
    return _with_unit(text, value, last=True) if (value := last_value(text)) else None


def anchored_answer(text: str) -> str | None:
    """The rightmost answer a response states in so many words ("The answer is 18",
    ``#### 18``, "Réponse : 18"), or None."""
    for anchor in reversed(list(_ANCHOR.finditer(text))):
        if answer := _after_anchor(text, anchor.end()):
            return answer
    return None


def _looping(text: str) -> bool:
    """Whether `text` ends in a loop: its last `_LOOP_REPEATS` stretches of one length
    (10 to `_LOOP_PERIOD` characters; Yi-1.5-9B-Chat's ran 503) are the same words and
    values.  A model that loops ("Let's try 4 + 4 + 2 = 10. This still doesn't add up
    to 19, so ...") was cut off by its token limit and concluded nothing; its last
    number is no answer.  The cost is bounded: about 0.1 ms on 8,000 characters."""
    tail = text.rstrip()
    for period in range(10, min(_LOOP_PERIOD, len(tail) // _LOOP_REPEATS) + 1):
        if tail[-1] != tail[-1 - period]:
            continue  # most lengths fail here, before a slice is copied
        unit = tail[-period:]
        if tail[-_LOOP_REPEATS * period :] == unit * _LOOP_REPEATS:
            return bool(_WORD_OR_VALUE.search(unit))
    return False


_LOOP_PERIOD = 1000
_LOOP_REPEATS = 3
_WORD_OR_VALUE = re.compile(r"\d|[^\W\d_]{2,}")  # not blank lines, nor escaped ones (`\\n`)


def _without_afterword(text: str) -> str:
    """`text` without what follows its last statement of a value and only restates or
    checks it: a check ("Let me double-check: $17 = 3 \\cdot 5 + 2$"), an approximation
    ("$\\frac{1}{6}$, which is approximately 0.1667") or an aside in parentheses ("25
    square units (5 x 5)") or where an optimum is reached ("The minimum is 2, attained
    at $x = 1$"), each cut only when a value stands before it and it draws no
    conclusion of its own ("Check: ... wrong, so x = 3.5" stays)."""
    spans = span_bounds(text)  # a cut never falls inside a span, so they hold for the rest
    for afterword in (_CHECK, _APPROXIMATION, _ASIDE, _ATTAINED):
        m = afterword.search(text)
        if not m or _CONCLUSION.search(m[0]) or any(a < m.start() < b for a, b in spans):
            continue  # it concludes, or it is inside math: `$(7,11), (11,7)$`
        if afterword is _ATTAINED and not _EXTREMUM.search(_sentence_before(text, m.start())):
            continue  # "f(n) = 5 when n = 3" may answer for n
        if last_value(text[: m.start()]) is not None:
            text = text[: m.start()]
    return text


def _sentence_before(text: str, at: int) -> str:
    """The sentence that ends at `at`: back to the last line break or ". " before it."""
    return text[max(text.rfind("\n", 0, at), text.rfind(". ", 0, at)) + 1 : at]


def _bare_answer(text: str) -> str | None:
    """The whole text as the answer, when it is one short line of math with at most
    one word (``\\mathrm{E}``, ``odd``, ``x^2 + 2*x + 1``), or one matrix."""
    text = text.strip().strip("*").strip()  # markdown bold: `**3**`
    long = len(text) > _MAX_WHOLE and not _ONE_ENVIRONMENT.fullmatch(text)
    if not text or long or "\n" in text or "$" in text.replace("\\$", "") or "\\[" in text or "\\(" in text:
        return None
    if len(words(text)) > 1:
        return None
    if (label := _LABEL.match(text)) and not words(text[label.end() :]):
        return statement_value(text[label.end() :].rstrip("."))  # "Result: 42", "Therefore 42."
    return statement_value(text)


def _after_anchor(text: str, at: int) -> str | None:
    """The answer that starts at `at`: math spans right there (several joined by
    "and", "or" or commas), or the rest of the sentence.  None after "not", or when
    the sentence is a question ("Is the answer 5?")."""
    if m := SPANS.match(text, at):
        group = [m]
        while (
            len(group) < MAX_JOINED and (j := JOIN.match(text, group[-1].end())) and (m := SPANS.match(text, j.end()))
        ):
            group.append(m)
        if _QUESTION.match(text, group[-1].end()):
            return None  # "My answer: $42$?"
        if taken_back := _NOT_BUT.match(text, group[-1].end()):
            return _after_anchor(text, taken_back.end())  # "答えは$5$ではなく$7$です"
        if answer := joined(group):
            return answer
    rest = text[at : at + 200]
    if _NOT.match(rest):  # "the answer is not 5"
        return None
    cut = _answer_end(rest)
    if cut and cut[0] in "?？":
        return None
    answer = (rest[: cut.start()] if cut else rest).strip().strip("*").strip()
    if taken_back := _NOT_BUT.search(answer):
        answer = answer[taken_back.end() :].strip()
    if not answer or not words(TEXT.sub(" ", answer)):
        return unwrap_box(answer) or None  # `\\mathbf{0.56 = 56\\%}` is `0.56 = 56\\%`
    if (bound := QUALIFIER.search(answer)) and any(
        (m := found.search(answer)) and bound.start() < m.start() for found in (VALUE, SPANS)
    ):
        return answer  # "at least 42", "probably $p$": whole, for the grader to refuse unless the gold says so
    return _value_in_prose(answer)


def _answer_end(rest: str) -> re.Match[str] | None:
    """Where the answer at the start of `rest` ends (`_ANSWER_END`), never inside braces
    (``\\text{Softball, Kickball}``).  A parenthesis is no aside after an operator, a
    comma or a command (``(0,9) \\cup (9,36)``, ``3 \\times (4+5)``, ``(1,2), (3,4)``),
    nor after a group when it holds math alone (``(2) (x+2) (x-2)``, not ``f(3) (see
    above)``), nor when it holds the value (``是 (\\frac{2}{5}) 吨``)."""
    cut = _ANSWER_END.search(rest)
    while cut and (
        rest.count("{", 0, cut.start()) > rest.count("}", 0, cut.start())
        or (
            cut[0].endswith("(")
            and (
                _CONTINUED.search(rest, 0, cut.start())
                or (_FACTOR.search(rest, 0, cut.start()) and not words(rest[cut.end() :].split(")")[0]))
                or (_LATEX_PAREN.match(rest, cut.start()) and not _VALUE_MARK.search(rest, 0, cut.start()))
            )
        )
    ):
        cut = _ANSWER_END.search(rest, cut.end())
    return cut


def _value_in_prose(sentence: str) -> str:
    """What an anchored sentence of prose answers: values joined by "or"/"and" as one
    list (a hedge is not its first value), else what follows its last copula outside
    math spans if that is math, else the first span or number after that copula, else
    the sentence's first span or number, else the sentence itself."""
    if listed := _listed(sentence) or _listed(sentence, counted=True):
        return listed  # "5 or 6", "1 and 2", "5 hours and 30 minutes"
    if copulas := _copulas(sentence):
        after = sentence[copulas[-1].end() :].strip().strip("*").strip()
        if m := SPANS.fullmatch(after):
            return span_answer(m) or sentence
        if after and not words(after):
            return after
        if value := first_value(after):  # "is 120 dollars"
            return _with_unit(after, value)
    return _with_unit(sentence, value) if (value := first_value(sentence)) else sentence


# A unit's word right after a value, whole: not one a rate, power or longer word goes
# on from, nor "in" ("5 in total"), the one unit that is a common word.
_UNIT_WORD = re.compile(
    r"\s*((?:(?:square|cubic)\s+)?(?!in\b)[a-zA-Z]{2,})(?!\s*(?:/|\^|per\b|squared\b|cubed\b)|[a-zA-Z])",
    re.IGNORECASE,
)


def _with_unit(text: str, value: str, *, last: bool = False) -> str:
    """`value` (its first place in `text`, or its `last`) with the unit of measure written
    after it ("120 dollars" is ``120 \\text{ dollars}``), so an answer in another unit
    than its gold's is refused in prose as in a box; a word that names no unit
    (``apples``) stays out."""
    at = text.rfind(value) if last else text.find(value)
    m = _UNIT_WORD.match(text, at + len(value)) if at >= 0 else None
    if m is None or not is_unit(m[1], value) or stated_unit(unit := f"{value} \\text{{ {m[1]}}}") is None:
        return value
    return unit


def _listed(text: str, *, counted: bool = False) -> str | None:
    """Plain values joined by commas, "and" or "or" (a hedge's words aside) as one
    list, when that is all `text` holds: "5 or 6" is ``5, 6``, "1,000 and 2,000" is
    ``1000, 2000``.  `counted`: each value may name what it counts ("5 hours and 30
    minutes", "3 boys and 2 girls" are ``5, 30`` and ``3, 2``, not a first value that
    one gold of 5 or 3 would equal)."""
    values = _ALTERNATIVES.split(_HEDGE_WORDS.sub(" ", text).strip().rstrip(".").strip())
    if counted:
        values = [m[1] if (m := _COUNTED.fullmatch(v)) else "" for v in values]
    if len(values) < 2 or not all(VALUE.fullmatch(v) for v in values):
        return None
    return ", ".join(v.replace(",", "") if _GROUPED.fullmatch(v) else v for v in values)


def _last_sentence_list(text: str) -> str | None:
    """The values listed after the last copula of the last sentence, if that is all
    there is after it ("The solutions are 1 and 2.")."""
    sentence = _SENTENCE_BREAK.split(text.strip())[-1]
    copulas = _copulas(sentence)
    return _listed(sentence[copulas[-1].end() :]) if copulas else None


def _copulas(sentence: str) -> list[re.Match[str]]:
    """The copulas of a sentence outside its math spans (an `=` inside math is none)."""
    spans = span_bounds(sentence)
    return [c for c in _COPULA.finditer(sentence) if not any(a <= c.start() < b for a, b in spans)]
