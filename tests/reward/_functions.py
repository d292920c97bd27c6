"""Reward functions of a user's, for the tests: each word of the response picks a
behaviour (run in grading workers, so this module is imported by path there too)."""

from __future__ import annotations

import os

import anyio

from rstar2_async.types import Problem


def _value(text: str, problem: Problem) -> float:
    if "raise" in text:
        raise ValueError("the judge could not read it")
    if "nan" in text:
        return float("nan")
    if "words" in text:
        return "high"  # type: ignore[return-value]
    return 1.0 if problem.answer in text else 0.25


def judge(text: str, problem: Problem) -> float:
    if "hang" in text:
        while True:
            pass
    if "crash" in text:
        os._exit(3)
    return _value(text, problem)


async def async_judge(text: str, problem: Problem) -> float:
    if "hang" in text:
        await anyio.sleep_forever()
    await anyio.lowlevel.checkpoint()
    return _value(text, problem)


def too_few(text: str) -> float:
    return 0.0
