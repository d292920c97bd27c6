"""Typed configuration of what a trajectory is worth and where problems come from:
the ``[reward]`` and ``[data]`` sections."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ._rollout import PositiveFloat, PositiveInt


class RewardConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How each finished trajectory is graded."""

    function: str | None = None
    """A ``"module:name"`` import path of a reward function ``(response_text, problem)
    -> float``, sync or async (see :class:`rstar2_async.reward.RewardFunction`).  A sync
    function runs in worker processes, an async one on the event loop; either is cut
    off at ``timeout_s`` (reward 0.0).  Omit for the math grader (rStar2's: the last
    ``\\boxed{}`` of the last ``<answer>`` block, checked by our normaliser and by
    math-verify)."""
    workers: PositiveInt = 2
    """Worker processes grading at once (the math grader, or a sync ``function``)."""
    timeout_s: PositiveFloat = 10.0
    """Wall-clock limit of one grading; past it the reward is 0.0 and its worker is
    replaced.  Real answers grade in milliseconds."""
    grading: Literal["strict", "lenient"] | None = None
    """How the math grader finds a response's final answer: ``"strict"``, rStar2's
    format (the last ``\\boxed{}`` of the last ``<answer>`` block; no box, no reward),
    or ``"lenient"`` (a box if there is one, else the answer written in free text:
    "the answer is ...", ``Answer:``, the last ``$...$`` or number; a decimal within a
    relative 1e-4 of a gold that is no integer is right, where strict is exact).  Omitted: strict
    for training; for ``rstar2 eval``, strict for a model that carries rstar2's rollout
    record (``rollout.toml``: trained here, on the format) and lenient for any other,
    whether served by a launched server, an endpoint in token mode or a chat endpoint
    (``--grading`` overrides).  Not read with ``function``."""


class DataConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Which JSON fields of a problem set hold what (every set of the run).  The shipped
    sets use the defaults; a set of ``{"question": ..., "final_answer": ...}`` lines
    needs ``problem_field = "question"`` and ``answer_field = "final_answer"``."""

    problem_field: Annotated[str, msgspec.Meta(min_length=1)] = "problem"
    """The problem statement (a string)."""
    answer_field: Annotated[str, msgspec.Meta(min_length=1)] = "answer"
    """The gold answer (a string or a number)."""
    id_field: Annotated[str, msgspec.Meta(min_length=1)] = "id"
    """A unique id (string or number); lines without one get ``<file stem>-<line>``."""
    source_field: Annotated[str, msgspec.Meta(min_length=1)] = "source"
    """Where the problem comes from (optional)."""
