"""The run's circuit breaker on infrastructure failures (``run.max_infra_failed_rate``).

A trajectory that stops at an infrastructure failure (``Trajectory.infra_failure``:
the sandbox or the inference servers failed, not the model) is rolled again by the
engine and, if it keeps failing, left out of training with its group (GRPO-RoC's rule
0).  That keeps the failures out of the gradient, but a run whose sandbox service is
gone would go on "training" on whatever few groups got through, at several times the
cost per step.  The breaker stops it instead, naming the part that fails.

The figure is the share of rollout attempts (each rolled-again attempt counts) that
met an infrastructure failure, pooled over the last :data:`WINDOW_STEPS` RL steps
(fewer at the start of a run or after a resume: the window restarts empty).  Why
pooled over steps: one step's blip (a sandbox service restarting, a server replaced)
should not stop a week-long run, while an outage spanning two steps, or a run broken
from its first step, should.  With equal steps, one step failing entirely reads as
1/5 of the window: exactly the default limit, not above it; a second such step trips it.

Streaming mode changes nothing here: a sample is rolled again inside its group's
stream position (its tokens only newer, so the staleness bound holds), and a group
dropped for a failure is a dropped position like an all-equal one (admission's count
and the stream's order are kept).

Pure policy (STYLE habit 7): the trainer feeds it each step's groups and stops the run
on the error it raises.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from typing import Final, NamedTuple

from ..errors import TrainError
from ..types import Group

__all__ = ["WINDOW_STEPS", "InfraBreaker"]

WINDOW_STEPS: Final = 5
"""RL steps the failure share is pooled over (see the module docstring)."""


class _Step(NamedTuple):
    failed: int
    attempts: int
    parts: Counter[str]
    last: dict[str, str]


def _step(groups: Sequence[Group]) -> _Step:
    failed = attempts = 0
    parts: Counter[str] = Counter()
    last: dict[str, str] = {}
    for g in groups:
        for t in g.trajectories:
            f, a = t.infra_attempts
            failed, attempts = failed + f, attempts + a
            for reason in t.infra_retries + ([t.infra_failure] if t.infra_failed else []):
                part, _, what = reason.partition(": ")
                parts[part] += 1
                last[part] = what
    return _Step(failed, attempts, parts, last)


class InfraBreaker:
    """Stops a run whose infrastructure keeps failing.

    Args:
        max_rate: the largest tolerated share of failed attempts over the window
            (``run.max_infra_failed_rate``; 1.0 never trips).
        window: RL steps pooled.
    """

    def __init__(self, max_rate: float, window: int = WINDOW_STEPS) -> None:
        self.max_rate = max_rate
        self._steps: deque[_Step] = deque(maxlen=window)

    def observe(self, step: int, groups: Sequence[Group]) -> None:
        """Take one RL step's finished groups (every one, dropped ones included).

        Raises:
            TrainError: the window's failure share is above ``max_rate``; the message
                names each failing part, how often it failed and its last reason.
        """
        self._steps.append(_step(groups))
        failed = sum(s.failed for s in self._steps)
        attempts = sum(s.attempts for s in self._steps)
        if not attempts or failed / attempts <= self.max_rate:
            return
        parts: Counter[str] = Counter()
        last: dict[str, str] = {}
        for s in self._steps:
            parts.update(s.parts)
            last.update(s.last)
        named = "; ".join(f"{part}: {count} failed, the last with {last[part]!r}" for part, count in parts.most_common())
        steps = len(self._steps)
        raise TrainError(
            f"step {step}: {failed} of {attempts} rollout attempts over the last {steps} step{'s' * (steps > 1)} "
            f"({failed / attempts:.0%}) stopped at an infrastructure failure, above run.max_infra_failed_rate = "
            f"{self.max_rate:g}: {named}. None of them was trained on; fix the failing part and continue with "
            "--resume (from the last checkpoint), or raise run.max_infra_failed_rate"
        )
