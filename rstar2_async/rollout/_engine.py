"""The rollout engine: many trajectories at once, groups streamed out as they finish.

Every trajectory is a task in one anyio task group.  A FIFO capacity limiter admits
at most ``rollout.max_in_flight`` at a time, acquired *before* the task is spawned, so
a batch of 100,000 trajectories never holds 100,000 waiting tasks.  A problem's group
is sent on the output stream the moment its last trajectory is graded: no barrier
over the batch, so the learner (or GRPO-RoC filtering) starts on early groups while
the long tail is still generating.

A run has one engine: every call (a training rollout, a rollout running ahead of
the learner, an evaluation) goes through the same limiter, so at most
``rollout.max_in_flight`` trajectories run at once however many calls overlap.  What
differs per call (sampling, turns, response tokens) goes with the call.

A trajectory that stops at an infrastructure failure (``Trajectory.infra_failure``)
is rolled again in its slot, up to ``rollout.infra_rerolls`` times, keeping its
admission; the earlier attempts' reasons travel in ``infra_retries``.  One that
still fails is not graded (its reward stays None) and GRPO-RoC drops its group.

Resource handling: leaving :meth:`RolloutEngine.stream`'s block, normally, by an
exception, or by cancellation, cancels every trajectory still running; their HTTP
requests and tool calls are cancelled with them.  The engine owns neither the
backend, the sandbox nor the reward: their owners close them.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final, TypedDict, Unpack, final

import anyio
import anyio.abc
import anyio.lowlevel
import msgspec
from anyio.abc import ObjectSendStream
from anyio.streams.memory import MemoryObjectReceiveStream

from backends import ChatBackend, SamplingParams, TokenBackend
from sandbox import Sandbox

from ..config import RolloutConfig, SamplingConfig
from ..reward import Reward
from ..types import Group, Problem, Trajectory
from ._agent import problem_messages, run_trajectory
from ._chat_template import ChatTokenizer
from ._seeds import derive_seed
from ._toolbox import Toolbox, load_tools
from .tools import Tool

__all__ = ["ADMISSION_BATCH", "RolloutEngine", "RolloutStatistics", "StreamOptions"]


ADMISSION_BATCH: Final = 256
"""Trajectories admitted between two checkpoints while tokens are free.  Each
checkpoint is a trip through the event loop, which costs about as much as starting a
trajectory; without any, admitting a batch of 100,000 would hold the loop (and
cancellation) for seconds while running trajectories wait."""


class RolloutStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the engine's counters (for progress bars and metrics)."""

    trajectories_started: int
    trajectories_finished: int
    in_flight: int
    waiting_for_admission: int
    groups_finished: int
    turns: int
    tool_calls: int
    tool_errors: int
    generated_tokens: int
    elapsed_s: float
    infra_failed: int = 0
    """Attempts that stopped at an infrastructure failure (rolled again or not)."""
    grading_ms: int = 0
    """Wall milliseconds during which at least one grading ran (gradings overlap the
    rollout and each other: summing their durations would count them twice).  An
    int, as the counters above: a sharded engine sums its workers' counters as ints."""


class StreamOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`RolloutEngine.stream` (and ``run``)."""

    sampling: SamplingConfig | None
    max_turns: int | None
    max_response_tokens: int | None
    finished: Mapping[tuple[str, int], Trajectory] | None
    on_trajectory: Callable[[Trajectory], None] | None


def check_limits(max_turns: int | None, max_response_tokens: int | None) -> None:
    """A call's own limits: ``None`` or ``>= 1``.

    Raises:
        ValueError: one is below 1 (the message names it).
    """
    for name, value in (("max_turns", max_turns), ("max_response_tokens", max_response_tokens)):
        if value is not None and value < 1:
            raise ValueError(f"{name}: expected int >= 1, got {value}")


async def in_order(problems: Sequence[Problem], stream: AbstractAsyncContextManager[MemoryObjectReceiveStream[Group]]) -> list[Group]:
    """Every group of ``stream`` (a ``stream()`` call over ``problems``), in the order of ``problems``."""
    order = {id(p): i for i, p in enumerate(problems)}
    async with stream as groups:
        collected = [group async for group in groups]
    return sorted(collected, key=lambda g: order[id(g.problem)])


class _PendingGroup:
    __slots__ = ("config", "on_trajectory", "problem", "prompt_ids", "remaining", "slots")

    def __init__(
        self, problem: Problem, n: int, config: RolloutConfig, on_trajectory: Callable[[Trajectory], None] | None
    ) -> None:
        self.problem = problem
        self.config = config
        self.slots: list[Trajectory | None] = [None] * n
        self.remaining = n
        self.on_trajectory = on_trajectory
        # Encoded once for all n samples: the tiny test model's tokenizer takes ~1 ms
        # per prompt (measured), more than the rest of a trajectory's bookkeeping.
        self.prompt_ids: list[int] | None = None


@final
class RolloutEngine:
    """Runs trajectories for problems and yields complete groups.

    Args:
        backend: a token backend (``generate``) when ``tokenizer`` is given, else a
            chat backend (``chat``).
        sandbox: where the tools run code.
        config: turn, token, time and admission limits, and the tools by import path.
        tokenizer: the model's chat tokenizer; ``None`` selects chat (text) mode.
        reward: grades each trajectory; ``None`` leaves ``reward`` unset.
        tools: the tools, instead of loading ``config.tools``.

    Raises:
        PluginError: a tool of ``config.tools`` does not load.
    """

    def __init__(
        self,
        *,
        backend: TokenBackend | ChatBackend,
        sandbox: Sandbox,
        config: RolloutConfig,
        tokenizer: ChatTokenizer | None = None,
        reward: Reward | None = None,
        tools: Sequence[Tool] | None = None,
    ) -> None:
        self.backend = backend
        self.config = config
        self.tokenizer = tokenizer
        self.reward = reward
        self.toolbox = Toolbox(load_tools(config.tools) if tools is None else tools, sandbox)
        self._limiter = anyio.CapacityLimiter(config.max_in_flight)
        self._started = self._finished = self._groups = 0
        self._turns = self._tool_calls = self._tool_errors = self._tokens = self._infra_failed = 0
        self._t0 = time.monotonic()
        self._grading, self._grading_s, self._grading_since = 0, 0.0, 0.0

    def statistics(self) -> RolloutStatistics:
        limiter = self._limiter.statistics()
        return RolloutStatistics(
            trajectories_started=self._started,
            trajectories_finished=self._finished,
            in_flight=limiter.borrowed_tokens,
            waiting_for_admission=limiter.tasks_waiting,
            groups_finished=self._groups,
            turns=self._turns,
            tool_calls=self._tool_calls,
            tool_errors=self._tool_errors,
            generated_tokens=self._tokens,
            infra_failed=self._infra_failed,
            elapsed_s=time.monotonic() - self._t0,
            grading_ms=int(1000 * (self._grading_s + (time.monotonic() - self._grading_since if self._grading else 0.0))),
        )

    @asynccontextmanager
    async def stream(
        self,
        problems: Sequence[Problem] | AsyncIterable[Problem],
        n: int,
        *,
        sampling: SamplingConfig | None = None,
        max_turns: int | None = None,
        max_response_tokens: int | None = None,
        finished: Mapping[tuple[str, int], Trajectory] | None = None,
        on_trajectory: Callable[[Trajectory], None] | None = None,
    ) -> AsyncIterator[MemoryObjectReceiveStream[Group]]:
        """Start ``n`` trajectories for each problem; yield a stream of finished groups.

        Groups arrive in completion order.  The stream ends after the last group.
        Trajectories of the same problem get sample indices ``0..n-1``.  ``problems``
        may be an async iterable (a memory object stream): each problem is taken
        once the previous one's trajectories have all been admitted, so whoever feeds
        it decides how far ahead work starts (streaming training); a group's
        ``problem`` is the very object that was fed.  Admission is
        shared with every other call on this engine (``rollout.max_in_flight`` in all).

        Args:
            sampling, max_turns, max_response_tokens: this call's own (an evaluation's
                sampling, a stage's limits); ``None`` keeps ``config``'s.
            finished: trajectories kept from an interrupted run, by
                ``(problem_id, sample_index)``; they fill their slots and are not re-run.
            on_trajectory: called with each new trajectory as it finishes (before its
                group is complete), e.g. to append it to a samples file.

        Usage::

            async with engine.stream(problems, n=16) as groups:
                async for group in groups:
                    ...
        """
        if n < 1:
            raise ValueError(f"n: expected int >= 1, got {n}")
        config = self._call_config(sampling, max_turns, max_response_tokens)
        # Unbounded: a finished group is already in memory, so a buffer holds nothing
        # extra, and send_nowait spares each trajectory two trips through the loop.
        send, receive = anyio.create_memory_object_stream[Group](math.inf)
        async with anyio.create_task_group() as tg:
            # Read as each problem is taken: a caller may add to it meanwhile (a shard worker).
            tg.start_soon(self._produce, problems, n, config, {} if finished is None else finished, on_trajectory, send)
            async with receive:
                try:
                    yield receive
                finally:
                    tg.cancel_scope.cancel()

    async def run(self, problems: Sequence[Problem], n: int, **options: Unpack[StreamOptions]) -> list[Group]:
        """All groups, in the order of ``problems``.  Arguments as for :meth:`stream`."""
        return await in_order(problems, self.stream(problems, n, **options))

    def _call_config(
        self, sampling: SamplingConfig | None, max_turns: int | None, max_response_tokens: int | None
    ) -> RolloutConfig:
        if sampling is None and max_turns is None and max_response_tokens is None:
            return self.config
        check_limits(max_turns, max_response_tokens)
        c = self.config
        return msgspec.structs.replace(
            c,
            sampling=c.sampling if sampling is None else sampling,
            max_turns=c.max_turns if max_turns is None else max_turns,
            max_response_tokens=c.max_response_tokens if max_response_tokens is None else max_response_tokens,
        )

    async def _produce(
        self,
        problems: Sequence[Problem] | AsyncIterable[Problem],
        n: int,
        config: RolloutConfig,
        finished: Mapping[tuple[str, int], Trajectory],
        on_trajectory: Callable[[Trajectory], None] | None,
        send: ObjectSendStream[Group],
    ) -> None:
        met: collections.Counter[str] = collections.Counter()  # for seeds: a call may hold one problem twice
        async with send, anyio.create_task_group() as tg:
            if isinstance(problems, Sequence):
                for problem in problems:
                    await self._start_group(tg, met, _PendingGroup(problem, n, config, on_trajectory), finished, send)
            else:  # a stream: each problem is taken when the previous group has all started
                async for problem in problems:
                    await self._start_group(tg, met, _PendingGroup(problem, n, config, on_trajectory), finished, send)

    async def _start_group(
        self,
        tg: anyio.abc.TaskGroup,
        met: collections.Counter[str],
        pending: _PendingGroup,
        finished: Mapping[tuple[str, int], Trajectory],
        send: ObjectSendStream[Group],
    ) -> None:
        problem, n, sampling = pending.problem, len(pending.slots), pending.config.sampling
        met[problem.id] += 1
        for i in range(n):
            if (problem.id, i) in finished:
                self._complete(pending, i, finished[problem.id, i], send)
                continue
            seed = None if sampling.seed is None else derive_seed(sampling.seed, problem.id, met[problem.id], i)
            params = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k, seed=seed)
            if pending.prompt_ids is None and self.tokenizer is not None:
                pending.prompt_ids = self.tokenizer.encode_prompt(problem_messages(problem, pending.config, self.toolbox))
            borrower = object()
            # Awaiting a free token costs a trip through the loop; most are free.
            # (Checked, not caught: anyio < 4.14 leaks trio.WouldBlock on trio.)
            if self._limiter.available_tokens >= 1:
                self._limiter.acquire_on_behalf_of_nowait(borrower)
            else:
                await self._limiter.acquire_on_behalf_of(borrower)
            self._started += 1
            if self._started % ADMISSION_BATCH == 0:
                await anyio.lowlevel.checkpoint()
            tg.start_soon(self._one, pending, i, params, borrower, send)

    async def _one(
        self, pending: _PendingGroup, i: int, params: SamplingParams, borrower: object, send: ObjectSendStream[Group]
    ) -> None:
        retries: list[str] = []
        try:
            while True:
                trajectory = await run_trajectory(
                    pending.problem,
                    i,
                    backend=self.backend,
                    toolbox=self.toolbox,
                    config=pending.config,
                    tokenizer=self.tokenizer,
                    sampling=params,
                    prompt_ids=pending.prompt_ids,
                )
                if not trajectory.infra_failed:
                    break
                self._infra_failed += 1
                if len(retries) == pending.config.infra_rerolls:
                    break
                retries.append(trajectory.infra_failure)
            if retries:
                trajectory = msgspec.structs.replace(trajectory, infra_retries=retries)
            if self.reward is not None and not trajectory.infra_failed:
                reward = await self._grade(trajectory.model_text, pending.problem)
                trajectory = msgspec.structs.replace(trajectory, reward=reward)
        finally:
            self._limiter.release_on_behalf_of(borrower)
        self._account(trajectory)
        if pending.on_trajectory is not None:
            pending.on_trajectory(trajectory)
        self._complete(pending, i, trajectory, send)

    async def _grade(self, model_text: str, problem: Problem) -> float:
        assert self.reward is not None
        if self._grading == 0:
            self._grading_since = time.monotonic()
        self._grading += 1
        try:
            return await self.reward.reward(model_text, problem)
        finally:
            self._grading -= 1
            if self._grading == 0:
                self._grading_s += time.monotonic() - self._grading_since

    def _complete(self, pending: _PendingGroup, i: int, trajectory: Trajectory, send: ObjectSendStream[Group]) -> None:
        pending.slots[i] = trajectory
        pending.remaining -= 1
        if pending.remaining == 0:
            self._groups += 1
            send.send_nowait(Group(problem=pending.problem, trajectories=pending.slots))  # type: ignore[arg-type]

    def _account(self, t: Trajectory) -> None:
        self._finished += 1
        self._turns += t.num_turns
        self._tool_calls += t.num_tool_calls
        self._tool_errors += t.num_tool_errors
        self._tokens += sum(turn.num_generated for turn in t.turns)
