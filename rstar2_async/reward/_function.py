"""A run's own reward: the :data:`RewardFunction` type, the :class:`Reward` the engine
calls, and loading a function from its ``"module:name"`` path."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Protocol

from .._plugins import load_object
from ..errors import PluginError
from ..types import Problem

__all__ = ["Reward", "RewardFunction", "load_function"]

RewardFunction = Callable[[str, Problem], float] | Callable[[str, Problem], Awaitable[float]]
"""A user's reward: ``(response_text, problem) -> float``, sync or async.
``response_text`` is what the model generated over all its turns (tool responses
left out), as the math grader reads it."""


class Reward(Protocol):
    """What the rollout engine calls when a trajectory ends (:class:`Grader` is one).

    Must not raise for anything the response contains; cancellation propagates."""

    async def reward(self, response_text: str, problem: Problem) -> float: ...


def load_function(path: str) -> Callable[..., object]:
    """The function at ``path``, checked to take ``(response_text, problem)``.

    Raises:
        PluginError: it does not load, or is not a function of two arguments.
    """
    fn = load_object(path, field="reward.function")
    try:
        inspect.signature(fn).bind("response", None)
    except TypeError:
        raise PluginError(f"reward.function: {path!r} is not a function (response_text, problem) -> float") from None
    except ValueError:  # no signature to read (a builtin): let the first call tell
        pass
    return fn
