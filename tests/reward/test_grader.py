"""The reward: answer extraction, format report, the sync `score` and the async `Grader`.

The grading workers are real processes running real math-verify.  The "hang" is a
real pathological answer: with the timeout under 3 s math-verify's own alarms are
off, and comparing ``7^{7^{10}}`` with 1 computes a 790-million-bit integer, which
runs for minutes, so only the grader's kill can end it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from hypothesis import given, settings
from hypothesis import strategies as st

from rstar2_async.recipe import data_dir
from rstar2_async.reward import (
    AnswerFormat,
    Grader,
    GraderStatistics,
    answer_format,
    extract_answer,
    score,
)
from rstar2_async.reward._worker import verify_answer

DATA = data_dir()
HANG = "<answer>\\boxed{7^{7^{10}}}</answer>"
DATASETS = ["math500", "aime24", "aime25", "hmmt_feb2024", "hmmt_feb2025", "gsm8k_test"]


def golds(dataset: str) -> list[str]:
    return [json.loads(line)["answer"] for line in (DATA / f"{dataset}.jsonl").open()]


def grading_workers() -> set[int]:
    """Pids of this process's live grading workers (any thread may have forked them)."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update(int(p) for p in (task / "children").read_text().split())
        except FileNotFoundError:  # a worker thread that ended since the listing
            continue
    alive = set()
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        if b"rstar2_async.reward" in cmdline and state != "Z":
            alive.add(pid)
    return alive


# --- extraction and format ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so <answer>The answer is \\boxed{42}.</answer>", "42"),
        ("\\boxed{\\frac{1}{2}} then \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
        ("\\boxed{\\left\\{1, 2\\right\\}}", "\\left\\{1, 2\\right\\}"),
        ("$\\boxed 5$", "5"),
        ("\\boxed  {7}", "7"),
        ("\\fbox{3}", "3"),
        ("\\boxed{\\boxed{5}}", "\\boxed{5}"),
        ("<answer>\\boxed{3}</answer> Wait, actually \\boxed{4}", "3"),
        ("\\boxed{1} <answer>no box here</answer> \\boxed{2}", "2"),
        ("<answer>\\boxed{1}</answer><answer>\\boxed{2}</answer>", "2"),
        ("\\boxed{9} and a cut-off \\boxed{1", "9"),
        # a stray backslash before the closing brace does not cut the box off; a set brace does not close it
        ("\\boxed{185\\}.", "185\\"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{9} then \\boxed{\\left\\{1, 2\\right.", "9"),
        ("\\boxed{} \\boxed{ }", None),
        ("\\boxedx{3}", None),
        ("no answer at all", None),
        ("", None),
    ],
)
def test_extract_answer(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("text", "blocks", "unmatched", "boxed_in", "well_formed"),
    [
        ("think <answer>\\boxed{1}</answer>", 1, 0, True, True),
        ("\\boxed{1}", 0, 0, False, False),
        ("<answer>1</answer>", 1, 0, False, False),
        ("<answer>\\boxed{1}</answer><answer>\\boxed{1}</answer>", 2, 0, True, False),
        ("<answer>\\boxed{1}", 0, 1, False, False),
        ("\\boxed{1}</answer>", 0, 1, False, False),
        ("<answer><answer>\\boxed{1}</answer>", 1, 1, True, False),
    ],
)
def test_answer_format(text: str, blocks: int, unmatched: int, boxed_in: bool, well_formed: bool) -> None:
    fmt = answer_format(text)
    assert (fmt.answer_blocks, fmt.unmatched_tags, fmt.boxed_in_answer) == (blocks, unmatched, boxed_in)
    assert fmt.well_formed is well_formed
    assert fmt.answer == extract_answer(text)


def test_extraction_is_linear_on_degenerate_responses() -> None:
    degenerate = [
        "\\boxed{" * 100_000,  # a model stuck opening boxes, never closing one
        "<answer>" * 100_000,
        "\\boxed " * 100_000,
        "{" * 100_000 + "\\boxed{1}",
    ]
    start = time.perf_counter()
    formats = [answer_format(text) for text in degenerate]
    assert time.perf_counter() - start < 2.0
    assert [f.answer for f in formats] == [None, None, "\\boxed", "1"]
    assert formats[1].unmatched_tags == 100_000


def test_answer_format_is_a_frozen_struct() -> None:
    fmt = answer_format("<answer>\\boxed{1}</answer>")
    assert isinstance(fmt, AnswerFormat)
    with pytest.raises(AttributeError):
        fmt.answer = "2"  # type: ignore[misc]


# --- the gold answers -------------------------------------------------------------------


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_gold_answer_boxed_verbatim_scores_one(dataset: str) -> None:
    answers = golds(dataset)
    assert [g for g in answers if score(f"<answer>\\boxed{{{g}}}</answer>", g) != 1.0] == []


@pytest.mark.parametrize("dataset", DATASETS)
def test_math_verify_alone_accepts_every_gold_answer(dataset: str) -> None:
    # The other check on its own (in this process: the main thread, so its alarms work).
    answers = golds(dataset)
    assert [g for g in answers if not verify_answer(g, g, alarm_s=5).correct] == []


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("<answer>\\boxed{\\pi/2}</answer>", "\\frac{\\pi}{2}", 1.0),  # math-verify only
        ("<answer>\\boxed{\\sqrt{8}}</answer>", "2\\sqrt{2}", 1.0),
        ("<answer>\\boxed{2\\cdot 3}</answer>", "6", 1.0),
        ("<answer>\\boxed{1{,}000}</answer>", "1000", 1.0),  # the normaliser only
        ("<answer>\\boxed{5.4 \\text{ cents}}</answer>", "5.4", 1.0),
        # a unit is dropped, but another unit is another value
        ("<answer>\\boxed{90 \\text{ radians}}</answer>", "90^\\circ", 0.0),
        ("<answer>\\boxed{90 \\text{ degrees}}</answer>", "90^\\circ", 1.0),
        ("<answer>\\boxed{8 \\text{ mm}}</answer>", "8\\text{ cm}", 0.0),
        ("<answer>\\boxed{8 \\text{ centimeters}}</answer>", "8\\text{ cm}", 1.0),
        ("<answer>\\boxed{15 \\text{ cm}}</answer>", "15\\mbox{ cm}^2", 0.0),
        ("<answer>\\boxed{15 \\text{ square centimeters}}</answer>", "15\\mbox{ cm}^2", 1.0),
        ("<answer>\\boxed{5.4 \\text{ dollars}}</answer>", "5.4 \\text{ cents}", 0.0),
        ("<answer>\\boxed{12 \\text{ oranges}}</answer>", "12 \\text{ apples}", 1.0),
        ("<answer>\\boxed{5 \\text{ cents}}</answer>", "\\$5", 0.0),
        ("<answer>\\boxed{\\$5}</answer>", "5 \\text{ dollars}", 1.0),
        ("<answer>\\boxed{1005_{2}}</answer>", "1005_8", 0.0),  # another base
        ("<answer>\\boxed{1005}</answer>", "1005_8", 1.0),
        # a value given for another variable: `x =` is dropped from each side before comparing
        ("<answer>\\boxed{y = 5}</answer>", "x = 5", 0.0),
        ("<answer>\\boxed{a_2 = 3}</answer>", "a_1 = 3", 0.0),
        ("<answer>\\boxed{y \\in [1, 2]}</answer>", "x \\in [1, 2]", 0.0),
        ("<answer>\\boxed{K = 5}</answer>", "k = 5", 1.0),
        ("<answer>\\boxed{x_1 = 5}</answer>", "x = 5", 1.0),
        ("<answer>\\boxed{a_{1} = 3}</answer>", "a_1 = 3", 1.0),
        ("<answer>\\boxed{5}</answer>", "x = 5", 1.0),
        ("<answer>\\boxed{f^{-1}(x) = 2x}</answer>", "2x", 1.0),  # an inverse function names no unknown
        ("<answer>\\boxed{f^{-1}(x) = 2x}</answer>", "f(x) = 2x", 0.0),
        # a residue with its modulus answers the remainder a gold gives
        ("<answer>\\boxed{5 \\pmod{7}}</answer>", "5", 1.0),
        ("<answer>\\boxed{5 \\text{ (mod 7)}}</answer>", "5", 1.0),
        ("<answer>\\boxed{12 \\pmod{7}}</answer>", "5", 0.0),
        ("<answer>\\boxed{5 \\pmod{8}}</answer>", "5 \\pmod{7}", 0.0),
        # a set has no order, and an interval is no two points
        ("<answer>\\boxed{\\{1, 2\\}}</answer>", "(1, 2)", 0.0),
        ("<answer>\\boxed{\\{2, 1\\}}</answer>", "(1, 2)", 0.0),
        ("<answer>\\boxed{\\{1, 2\\}}</answer>", "1, 2", 1.0),  # count nouns: no unit of measure
        ("<answer>\\boxed{\\pi/3}</answer>", "\\frac{\\pi}{2}", 0.0),
        ("<answer>\\boxed{(1,2)}</answer>", "(2,1)", 0.0),
        ("<answer>42</answer>", "42", 0.0),  # no box, no grade
        ("\\boxed{" + "1" * 5000 + "}", "1" * 5000, 0.0),  # runaway answers are refused
    ],
)
def test_score(response: str, gold: str, expected: float) -> None:
    assert score(response, gold) == expected


@settings(max_examples=40, deadline=None)
@given(st.integers(-(10**9), 10**9), st.integers(-(10**9), 10**9))
def test_score_integers(n: int, m: int) -> None:
    for dressed in (f"{n:,}", f"{n}", f"\\text{{{n}}}"):
        assert score(f"<answer>\\boxed{{{dressed}}}</answer>", str(n)) == 1.0
        if m != n:
            assert score(f"<answer>\\boxed{{{dressed}}}</answer>", str(m)) == 0.0


def test_sync_score_times_out_and_recovers() -> None:
    start = time.monotonic()
    assert score(HANG, "1", timeout=1.0) == 0.0
    assert time.monotonic() - start < 5.0
    assert score("<answer>\\boxed{\\pi/2}</answer>", "\\frac{\\pi}{2}") == 1.0


# --- the async grader (asyncio and trio) -----------------------------------------------


@pytest.mark.anyio
async def test_grader_scores_concurrently_and_counts() -> None:
    cases = [
        ("<answer>\\boxed{\\pi/2}</answer>", "\\frac{\\pi}{2}", 1.0),
        ("<answer>\\boxed{1,000}</answer>", "1000", 1.0),
        ("<answer>\\boxed{\\sqrt{8}}</answer>", "2\\sqrt{2}", 1.0),
        ("<answer>\\boxed{3}</answer>", "4", 0.0),
        ("nothing", "4", 0.0),
    ] * 4
    results: dict[int, float] = {}
    async with Grader(workers=2, timeout=5.0) as grader:

        async def one(i: int, response: str, gold: str) -> None:
            results[i] = await grader.score(response, gold)

        async with anyio.create_task_group() as tg:
            for i, (response, gold, _) in enumerate(cases):
                tg.start_soon(one, i, response, gold)
        stats = grader.statistics()
    assert [results[i] for i in range(len(cases))] == [expected for *_, expected in cases]
    assert isinstance(stats, GraderStatistics)
    assert (stats.graded, stats.correct, stats.by_normaliser) == (20, 12, 4)
    assert (stats.workers_started, stats.workers_alive, stats.timeouts, stats.worker_crashes) == (2, 2, 0, 0)
    assert (stats.workers_busy, stats.tasks_waiting) == (0, 0)


@pytest.mark.anyio
async def test_grader_settles_two_different_integers_without_a_worker() -> None:
    async with Grader(workers=1, timeout=5.0) as grader:
        assert await grader.score("<answer>\\boxed{4604}</answer>", "4664") == 0.0
        assert await grader.score("<answer>\\boxed{-12}</answer>", "12") == 0.0
        assert await grader.score("<answer>\\boxed{0012}</answer>", "12") == 1.0
        assert grader.statistics().without_worker == 3
        # a non-integer on either side still goes to math-verify
        assert await grader.score("<answer>\\boxed{2^{10}}</answer>", "1024") == 1.0
        assert (grader.statistics().graded, grader.statistics().without_worker) == (4, 3)


@pytest.mark.anyio
async def test_grader_hang_returns_zero_within_deadline_then_recovers() -> None:
    before = grading_workers()
    async with Grader(workers=1, timeout=1.0) as grader:
        start = anyio.current_time()
        assert await grader.score(HANG, "1") == 0.0
        assert anyio.current_time() - start < 5.0
        assert grader.statistics().timeouts == 1
        assert grader.statistics().workers_alive == 0  # killed, replaced on demand
        assert await grader.score("<answer>\\boxed{\\pi/2}</answer>", "\\frac{\\pi}{2}") == 1.0
        assert grader.statistics().workers_started == 2
    assert grading_workers() <= before


@pytest.mark.anyio
async def test_grader_cancellation_kills_the_busy_worker_only() -> None:
    before = grading_workers()
    async with Grader(workers=1, timeout=60.0) as grader:
        async with anyio.create_task_group() as tg:
            tg.start_soon(grader.score, HANG, "1")
            await wait_all_tasks_blocked()  # the call is waiting on its worker
            tg.cancel_scope.cancel()
        stats = grader.statistics()
        assert (stats.workers_alive, stats.workers_busy, stats.graded, stats.timeouts) == (0, 0, 0, 0)
        assert await grader.score("<answer>\\boxed{\\sqrt{8}}</answer>", "2\\sqrt2") == 1.0
    assert grading_workers() <= before


@pytest.mark.anyio
async def test_grader_survives_a_worker_crash() -> None:
    before = grading_workers()  # the sync worker of `score`, if started
    async with Grader(workers=1, timeout=5.0) as grader:
        (pid,) = grading_workers() - before
        os.kill(pid, 9)
        assert await grader.score("<answer>\\boxed{\\pi/2}</answer>", "\\frac{\\pi}{2}") == 0.0
        assert grader.statistics().worker_crashes == 1
        assert await grader.score("<answer>\\boxed{\\pi/2}</answer>", "\\frac{\\pi}{2}") == 1.0


@pytest.mark.anyio
async def test_closing_kills_busy_workers_and_fails_their_callers() -> None:
    before = grading_workers()
    outcome: list[BaseException] = []
    async with anyio.create_task_group() as tg:
        async with Grader(workers=1, timeout=60.0) as grader:

            async def hung_call() -> None:
                try:
                    await grader.score(HANG, "1")
                except anyio.ClosedResourceError as exc:
                    outcome.append(exc)

            tg.start_soon(hung_call)
            await wait_all_tasks_blocked()
            assert grader.statistics().workers_busy == 1
    assert len(outcome) == 1
    assert grading_workers() <= before
    with pytest.raises(anyio.ClosedResourceError):
        await grader.score("\\boxed{1}", "1")


@pytest.mark.anyio
async def test_grader_lifecycle_errors() -> None:
    grader = Grader(workers=1)
    with pytest.raises(RuntimeError, match="before"):
        await grader.score("\\boxed{1}", "1")
    async with grader:
        with pytest.raises(RuntimeError, match="open"):
            await grader.__aenter__()
    with pytest.raises(RuntimeError, match="closed"):
        await grader.__aenter__()


def test_grader_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="workers"):
        Grader(workers=0)
    with pytest.raises(ValueError, match="timeout"):
        Grader(timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        score("\\boxed{1}", "2", timeout=0)


@pytest.mark.anyio
async def test_a_settled_pair_is_not_asked_again() -> None:
    async with Grader(workers=1, timeout=10.0) as grader:
        for _ in range(3):  # math-verify settles \pi/2 against \frac{\pi}{2} once
            assert await grader.score("<answer>\\boxed{\\pi/2}</answer>", "\\frac{\\pi}{2}") == 1.0
        stats = grader.statistics()
        assert (stats.graded, stats.without_worker, stats.workers_started) == (3, 2, 1)
