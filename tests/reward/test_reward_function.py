"""A reward function of the user's (``[reward] function``), sync in worker processes
or async on the loop, with the math grader's timeout and worker guarantees."""

from __future__ import annotations

import anyio
import pytest

from rstar2_async.errors import PluginError
from rstar2_async.reward import Grader
from rstar2_async.types import Problem

pytestmark = pytest.mark.anyio

PROBLEM = Problem(id="p", problem="What is 6 * 7?", answer="42")


@pytest.mark.parametrize("function", ["tests.reward._functions:judge", "tests.reward._functions:async_judge"])
async def test_values_errors_and_timeouts(function: str) -> None:
    async with Grader(workers=1, timeout=1.0, function=function) as grader:
        assert await grader.reward("it is 42", PROBLEM) == 1.0
        assert await grader.reward("it is 41", PROBLEM) == 0.25
        for bad in ("raise", "nan", "words"):  # a broken call is worth 0.0, counted
            assert await grader.reward(bad, PROBLEM) == 0.0
        with anyio.fail_after(20):
            assert await grader.reward("hang", PROBLEM) == 0.0  # cut off at the timeout
        assert await grader.reward("42 again", PROBLEM) == 1.0  # and the grader goes on
        stats = grader.statistics()
    assert stats.function_errors == 3 and stats.timeouts == 1
    assert stats.graded == 7 and stats.correct == 2
    if function.endswith(":judge"):
        assert stats.workers_started == 2  # the hung worker was replaced
    else:
        assert stats.workers_started == 0  # an async function runs on the loop


async def test_a_crashed_worker_is_replaced() -> None:
    async with Grader(workers=1, timeout=5.0, function="tests.reward._functions:judge") as grader:
        assert await grader.reward("crash", PROBLEM) == 0.0
        assert await grader.reward("42", PROBLEM) == 1.0
        stats = grader.statistics()
        assert stats.worker_crashes == 1 and stats.workers_started == 2 and stats.workers_alive == 1
    assert grader.statistics().workers_alive == 0  # none outlives the block


async def test_a_function_grader_does_not_take_gold_strings() -> None:
    async with Grader(workers=1, function="tests.reward._functions:async_judge") as grader:
        with pytest.raises(RuntimeError, match="call reward"):
            await grader.score("42", "42")


@pytest.mark.parametrize(
    ("function", "fragment"),
    [
        ("tests.reward._functions:missing", "has no 'missing'"),
        ("tests.reward._functions:too_few", "is not a function (response_text, problem)"),
        ("nowhere.at_all:judge", "cannot import 'nowhere.at_all'"),
    ],
)
def test_a_bad_function_is_a_plugin_error(function: str, fragment: str) -> None:
    with pytest.raises(PluginError, match="reward.function") as info:
        Grader(function=function)
    assert fragment in str(info.value)


async def test_the_math_grader_stays_the_default() -> None:
    async with Grader(workers=1) as grader:
        assert await grader.reward("<answer>\\boxed{42}</answer>", PROBLEM) == 1.0
        assert await grader.reward("<answer>\\boxed{41}</answer>", PROBLEM) == 0.0
