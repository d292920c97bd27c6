"""The math grader for plain synchronous code, and what it shares with `Grader`: the
verdicts reached without math-verify and the worker's alarm.

Both grade in one of two modes (`GradingMode`, see ``_lenient``): ``"strict"``, the
default and what training uses, reads rStar2's boxed answer only; ``"lenient"`` also
reads a response's final answer from free text, for evaluating outside models."""

from __future__ import annotations

import atexit
import os
import re
import threading

from ._compare import GradingMode, answers_match, equation_sides, false_equation, rel_tolerance, set_for_ordered
from ._lenient import answer_box, answer_in, gold_answer, readable
from ._normalise import FUNCTION_COMMANDS, INVERSE, MAX_ANSWER_CHARS, QUALIFIER, TEXT_CMD
from ._notation import python_notation
from ._spans import ALTERNATIVE
from ._units import stated_unit
from ._worker import GradeRequest, SyncWorker

__all__ = ["GRADING_TIMEOUT_S", "grade_request", "quick_verdict", "score"]

GRADING_TIMEOUT_S = 10.0
"""Default wall-clock limit on one math-verify grading.  Real answers grade in
milliseconds; math-verify's own limits are 5 s per step, so anything near 10 s is a
pathological expression (a tower of powers, a huge factorial) that is wrong anyway."""

_PLAIN_INT = re.compile(r"\s*[-+]?\d{1,50}\s*")
"""An integer literal (no separators): exact, so the normaliser's "no" is final."""
_SUBSCRIPT = re.compile(r"_\{?\w+\}?|\\[a-zA-Z]+")
_UNKNOWN_EXPRESSION = re.compile(r"(?=.*[a-zA-Z])(?=.*[\d+\-*/^])")
"""A letter beside a digit or an operator: ``3x + 2``, not ``x``, ``a_1`` or ``\\text{Area}``."""


def _unsolved(answer: str, gold: str) -> bool:
    """An equation whose left side is an expression in an unknown (``3x + 2 = 11``)
    does not answer a gold answer with no ``=``; math-verify would compare its right
    side (11) and accept it."""
    sides = equation_sides(answer)
    return len(sides) == 2 and "=" not in gold and bool(_UNKNOWN_EXPRESSION.match(_SUBSCRIPT.sub("", sides[0])))


_FUNCTION_LEFT = re.compile(rf"\s*\\(?:{FUNCTION_COMMANDS})(?![a-zA-Z])")
_GROUPING = re.compile(r"[(){}\s]|\\left|\\right")


def _other_function(answer: str, gold: str) -> bool:
    """``\\cos(x) = \\frac{42}{59}`` does not answer ``\\sin(x) = \\frac{42}{59}``: two
    equations whose left sides apply different functions; math-verify would compare
    their right sides only and accept it."""
    a, g = equation_sides(answer), equation_sides(gold)
    if len(a) != 2 or len(g) != 2 or not (_FUNCTION_LEFT.match(a[0]) or _FUNCTION_LEFT.match(g[0])):
        return False
    return _GROUPING.sub("", a[0]) != _GROUPING.sub("", g[0])


_NAMED = re.compile(r"\s*(?P<name>[a-zA-Z])(?:_\{?\s*(?P<index>\w+)\s*\}?)?\s*(?:=|\\in(?![a-zA-Z]))")
"""An answer that names the variable it gives (``x = 5``, ``a_{1} = 3``, ``x \\in [0,
1)``).  A Greek letter's statement (``\\theta = 30``) is read as its value before this."""


_FUNCTION = re.compile(rf"\s*[a-zA-Z]\s*(?P<inverse>{INVERSE})?\s*\(\s*[a-z]\s*\)\s*=")


def _other_variable(answer: str, gold: str) -> bool:
    """``y = 5`` does not answer ``x = 5``, nor ``a_2 = 3`` ``a_1 = 3``, nor ``f^{-1}(x) =
    2x`` ``f(x) = 2x``: the normaliser drops a leading ``x =`` or ``f(x) =`` from each
    side (so ``5`` answers ``x = 5``), which paid a value given for another variable or
    function.  Letters are compared in either case (``K`` is ``k`` as often as not), and
    an index only when both have one."""
    if answer.count("=") > 1 or gold.count("=") > 1:
        return False
    fa, fg = _FUNCTION.match(answer), _FUNCTION.match(gold)
    if fa and fg and bool(fa["inverse"]) != bool(fg["inverse"]):
        return True
    a, g = _NAMED.match(answer), _NAMED.match(gold)
    if a is None or g is None:
        return False
    if a["name"].lower() != g["name"].lower():
        return True
    return a["index"] is not None and g["index"] is not None and a["index"] != g["index"]


_SEVERAL = re.compile(r",|\\(?:cup|pm|mp|in)(?![a-zA-Z])|(?:\||\\rvert)\s*(?:>|\\g)")
"""What makes a gold answer more than one value: a list or set (their commas), a union
(``|x| > 8`` is one too), ``\\pm``; every gold the comparer splits into parts has one of them."""
_SET_BUILDER = re.compile(r"\s*\\\{\s*[a-zA-Z]\s*(?:\\in\s*[^|:]*?)?(?:\\mid|\||:|\\colon)")
"""``\\{x \\mid x > 2\\}``: a set written by its condition, whose bar is no alternative."""
_MANY = re.compile(r",\s*\\(?:[lc]?dots)(?![a-zA-Z])|\\begin\{cases\}")
"""A sequence written with an ellipsis (``1, 2, \\ldots, 10``) or cases: many values."""


def _hedged(answer: str, gold: str) -> bool:
    """An answer of alternatives (``x = 1 \\text{ or } x = 2``, ``1 \\lor 2``, ``1 \\mid
    2``, ``1 | 2``, a line break between two values) or of many values (``1, \\ldots,
    2``, cases) does not answer a gold answer of one value; math-verify would read one
    of them (the last) and accept it."""
    # A lone `|` separates too (`1 | 2`); two are an absolute value.
    alternatives = (
        (ALTERNATIVE.search(answer) or answer.count("|") == 1)
        and "\\begin" not in answer
        and not _SET_BUILDER.match(answer)
    )
    many = _MANY.search(answer) and not _MANY.search(gold)
    if not (alternatives or many):
        return False
    return not (ALTERNATIVE.search(gold) or _SEVERAL.search(gold))


_GAP = r"(?:\s|\\[,;:! ]|~)+"
_SPACED_DIGITS = re.compile(rf"(?<![\w./^_])\d+(?:{_GAP}\d+)+(?![\w./^_])")  # not `1 1/2`, `2^6 3^5`
_THOUSANDS = re.compile(rf"\d{{1,3}}(?:{_GAP}\d{{3}})+")


def _split_number(answer: str, gold: str) -> bool:
    """Digits apart by spacing that are no thousands groups (``2 3``, ``2\\,3``) are no
    clear number (23? 2 and 3? math-verify reads 5); ``1 000`` is one."""
    return any(not _THOUSANDS.fullmatch(m[0]) for m in _SPACED_DIGITS.finditer(answer)) and not (
        _SPACED_DIGITS.search(gold)
    )


# An answer that opens with a relation or a negation: `\ge 2` is no value.
_OPEN_RELATION = re.compile(r"\s*(?:\\(?:geq?|leq?|neq?|gt|lt|neg|lnot|nless|ngtr)(?![a-zA-Z])|[<>≥≤≠]|!=)")


def _qualified(answer: str, gold: str) -> bool:
    """An answer that takes its value back or bounds it (``2 \\text{ (wrong)}``, ``2
    \\text{ is not the answer}``, ``\\text{at least } 2``, ``\\ge 2``) does not answer a
    gold that says no such thing; math-verify ignores ``\\text{}`` and would accept it."""
    if (QUALIFIER.search(answer) and not QUALIFIER.search(gold)) or ("?" in answer and "?" not in gold):
        return True  # `2 \\text{?}` is a guess
    return bool(_OPEN_RELATION.match(answer)) and not _OPEN_RELATION.match(gold)


_OPEN_VALUE = re.compile(r"^\s*(?:=(?!=)|\\(?:approx|simeq|sim)(?![a-zA-Z])|[≈≃])\s*")
"""An answer that opens with "=" (``= 1,234``, the right side of a statement cut
before it) or with "≈" (``\\approx 268``, as ``x \\approx 268`` without its ``x``):
the value after it."""
_STOP = re.compile(r"(?<![.\\])[.,;:]\s*$")
"""The stop of a sentence after a final answer (``\\boxed{3x^2 + 4x + 7.}``), no part of
it: math-verify cannot parse the answer with it, and falls back to the answer's last
number, so a gold of 7 was paid.  An ellipsis (``1, 2, ...``) and ``\\,`` stay."""
_PROSE_JOIN = re.compile(r"(?<![a-zA-Z\\])and(?:\s|\\[ ,;:!]|~|\}|\{)+(?:\\?[a-zA-Z]+\s+)*[a-zA-Z]{2,}")
"""A gold that joins a value to words by "and" (``1 and odd prime numbers``): the
words are part of the answer, but math-verify reads the value alone."""
_WORD_OR_NUMBER = re.compile(r"[a-zA-Z]+|\d+(?:\.\d+)?")


def _other_prose(answer: str, gold: str) -> bool:
    """An answer to a gold of a value and prose that does not say the same words
    (``1``, ``1 \\text{ and even numbers}``): nothing here can judge prose, and the
    value alone is not the answer."""
    digit = re.search(r"\d", gold)
    if digit is None or not _PROSE_JOIN.search(gold, digit.end()):
        return False
    words = [w.lower() for w in _WORD_OR_NUMBER.findall(re.sub(TEXT_CMD, "", answer))]
    return words != [w.lower() for w in _WORD_OR_NUMBER.findall(re.sub(TEXT_CMD, "", gold))]


def _other_unit(answer: str, gold: str) -> bool:
    """An answer in another unit of measure than its gold's (``90 \\text{ radians}``
    for ``90^\\circ``, ``8\\text{ mm}`` for ``8\\text{ cm}``, ``5 \\text{ cm}`` for ``5
    \\text{ cm}^2``): units are dropped before comparing, by math-verify too, so its
    number alone would be paid."""
    unit = stated_unit(answer)
    return unit is not None and stated_unit(gold) not in (None, unit)


_MODULUS = re.compile(
    r"\s*(?:\\pmod\s*(?:\{[^{}]*\}|\w+)|\(?\s*\\(?:bmod|mod)(?![a-zA-Z])\s*(?:\{[^{}]*\}|\w+)\s*\)?"
    r"|\(\s*\\(?:text|mathrm)\{\s*mod\s*\}\s*\w+\s*\)|\\text\{\s*\(\s*mod\s+\w+\s*\)\s*\})\s*$"
)
"""The modulus a residue is written with: ``5 \\pmod{7}``, ``5 \\bmod 7``, ``5 \\text{ (mod 7)}``."""


def _without_modulus(answer: str, gold: str) -> str:
    """``5 \\pmod{7}`` answers a gold of 5 (the remainder a question asked for); a gold
    written with its modulus is compared with it."""
    return answer if "mod" in gold else _MODULUS.sub("", answer)


def _same_text(text: str, gold: str) -> bool:
    """`text` (a whole response without its end tokens, or its box) is the gold text
    itself, spacing aside."""
    return " ".join(text.split()) == " ".join(gold.split()) != ""


def quick_verdict(response_text: str, gold: str, mode: GradingMode = "strict") -> tuple[float | None, str, str]:
    """(verdict, answer, gold answer): a verdict reached without math-verify, else
    (None, answer, gold answer) for math-verify to settle."""
    given = gold
    gold = python_notation(gold_answer(gold))
    text = readable(response_text)
    answer = answer_in(text, gold, mode=mode)
    if len(given) <= MAX_ANSWER_CHARS and (
        _same_text(answer_box(text, mode) or "", given) or (mode == "lenient" and _same_text(text, given))
    ):
        return 1.0, given, given  # `odd $n$` for `odd $n$`, boxed or (lenient) not: nothing to read
    if answer is None or len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return 0.0, "", gold
    answer, gold = _STOP.sub("", _OPEN_VALUE.sub("", python_notation(answer))), _STOP.sub("", gold)
    answer = _without_modulus(answer, gold)
    if (
        _hedged(answer, gold)
        or _qualified(answer, gold)
        or _split_number(answer, gold)
        or _other_prose(answer, gold)
        or _other_unit(answer, gold)
        or _other_variable(answer, gold)
        or set_for_ordered(answer, gold)
    ):
        return 0.0, answer, gold
    if answers_match(answer, gold, mode=mode):
        return 1.0, answer, gold
    if _unsolved(answer, gold) or _other_function(answer, gold) or false_equation(answer):
        return 0.0, answer, gold
    if _PLAIN_INT.fullmatch(answer) and _PLAIN_INT.fullmatch(gold):
        return 0.0, answer, gold  # two different integers: math-verify cannot disagree
    return None, answer, gold


def grade_request(answer: str, gold: str, timeout: float, mode: GradingMode) -> GradeRequest:
    """What a worker is asked when `quick_verdict` settles nothing."""
    return GradeRequest(
        answer=answer, gold=gold, alarm_s=alarm_seconds(timeout), rel_tol=rel_tolerance(answer, gold, mode)
    )


def alarm_seconds(timeout: float) -> int:
    """math-verify's own per-step limit: its three alarms together stay within
    `timeout`, so a slow comparison usually ends without losing the worker."""
    return int(timeout // 3)


_sync_lock = threading.Lock()
_sync_worker: SyncWorker | None = None


@atexit.register
def _kill_sync_worker() -> None:
    global _sync_worker
    with _sync_lock:
        if _sync_worker is not None and _sync_worker.owner_pid == os.getpid():
            _sync_worker.kill()
        _sync_worker = None


def score(response_text: str, gold: str, *, timeout: float = GRADING_TIMEOUT_S, mode: GradingMode = "strict") -> float:
    """Grade one response against the gold answer: 1.0 if right, else 0.0.

    ``mode="strict"`` (the default, rStar2's format) grades the boxed answer only;
    ``mode="lenient"`` also reads an answer written without a box (see `final_answer`).

    Synchronous, for plain code.  Calls from several threads are safe and take turns
    on this process's one worker; `timeout` bounds the grading itself, not the wait
    for a turn.  Do not call it from inside an event loop (it blocks); use `Grader`.

    Resource handling: the worker starts on the first call that needs math-verify,
    is replaced after a call that overran `timeout` (that call returns 0.0), and is
    killed at interpreter exit.  A forked child starts its own.

    Raises:
        GraderBrokenError: no worker could be started.
        ValueError: `timeout` <= 0, or an unknown `mode`.
    """
    global _sync_worker
    if not timeout > 0:
        raise ValueError(f"timeout: expected seconds > 0, got {timeout!r}")
    verdict, answer, gold = quick_verdict(response_text, gold, mode)
    if verdict is not None:
        return verdict
    request = grade_request(answer, gold, timeout, mode)
    with _sync_lock:
        if _sync_worker is None or _sync_worker.owner_pid != os.getpid():
            _sync_worker = SyncWorker()
        reply = _sync_worker.grade(request, timeout)
        if reply is None:
            _sync_worker.kill()
            _sync_worker = None
            return 0.0
    return 1.0 if reply.correct else 0.0
