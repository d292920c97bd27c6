"""A shard worker: ``python -m rstar2_async.rollout._shard_worker``.

Reads a :class:`ShardSpec` on stdin, enters its factory's stack, sends ``Ready``,
then serves the parent's messages (see ``_shard_wire``) until EOF on stdin, which
cancels whatever still runs and closes the stack.  One engine stream per stream
of the parent, fed problem by problem as they are assigned; each finished
trajectory goes back at once, then its group's ``GroupDone``.

The protocol owns the original stdout and stdin: fd 1 is pointed at stderr (so a
print anywhere cannot corrupt a frame) and fd 0 at /dev/null (so a child process
cannot read frames meant for this one).

The worker's collector is the trainer's (:func:`tune_gc`, set before the factory
runs), and it looks for the cycles that freezing kept at each ``SetVersion``
(:func:`collect_frozen_garbage`): once a weight sync, while the servers are paused.
"""

from __future__ import annotations

import contextlib
import math
import os
from functools import partial
from typing import Final

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._plugins import load_object
from ..types import Problem, Trajectory
from ._runtime import RUN_OPTIONS, collect_frozen_garbage, tune_gc
from ._shard_wire import (
    HEADER,
    SPEC_DECODER,
    TO_WORKER,
    Assign,
    Barrier,
    Cancel,
    Close,
    GroupDone,
    Held,
    Hold,
    Open,
    Passed,
    Ready,
    Release,
    Report,
    Reported,
    REPORT_INTERVAL_S,
    SetVersion,
    ShardFactory,
    ShardSpec,
    ShardStack,
    TakeOut,
    TrajectoryDone,
    frame,
    local_servers,
)

READ_CHUNK: Final = 1 << 16


class _Pipe:
    """Frames over a pipe's file descriptor, non-blocking, through the event loop."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self._buffer = bytearray()

    async def receive_exactly(self, n: int) -> bytes:
        """Raises ``anyio.EndOfStream`` at EOF."""
        while len(self._buffer) < n:
            try:
                chunk = os.read(self.fd, max(READ_CHUNK, n - len(self._buffer)))
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
                continue
            if not chunk:
                raise anyio.EndOfStream
            self._buffer += chunk
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def receive_frame(self) -> bytes:
        (size,) = HEADER.unpack(await self.receive_exactly(HEADER.size))
        return await self.receive_exactly(size)

    async def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self.fd)


class _Stream:
    __slots__ = ("feed", "finished", "scope")

    def __init__(self, feed: MemoryObjectSendStream[Problem]) -> None:
        self.feed = feed
        self.finished: dict[tuple[str, int], Trajectory] = {}
        self.scope = anyio.CancelScope()


class _Worker:
    """Serves one parent with one factory's stack."""

    def __init__(self, spec: ShardSpec, stack: ShardStack, tg: anyio.abc.TaskGroup) -> None:
        self.spec, self.engine, self.pool, self.tg = spec, stack.engine, stack.pool, tg
        self.streams: dict[int, _Stream] = {}
        self.holds: dict[int, anyio.Event] = {}
        # Unbounded: what goes out is what the parent asked for (bounded by the
        # engine's admission), and the parent reads as fast as it can.
        self.out, self.outgoing = anyio.create_memory_object_stream[bytes](math.inf)

    def report(self) -> Report:
        return Report(rollout=self.engine.statistics(), pool=None if self.pool is None else self.pool.statistics())

    async def write(self, pipe: _Pipe) -> None:
        async with self.outgoing:
            async for data in self.outgoing:
                await pipe.send_all(data)

    async def report_every(self) -> None:
        while True:
            await anyio.sleep(REPORT_INTERVAL_S)
            self.out.send_nowait(frame(Reported(report=self.report())))

    async def handle(self, message: object) -> None:
        match message:
            case Open():
                feed, problems = anyio.create_memory_object_stream[Problem](math.inf)
                self.streams[message.stream] = stream = _Stream(feed)
                self.tg.start_soon(self._run, message, stream, problems)
            case Assign(stream=sid, problem=problem, finished=finished):
                if (stream := self.streams.get(sid)) is not None:
                    stream.finished.update(((t.problem_id, t.sample_index), t) for t in finished)
                    stream.feed.send_nowait(problem)
            case Close(stream=sid):
                if (stream := self.streams.get(sid)) is not None:
                    stream.feed.close()
            case Cancel(stream=sid):
                if (stream := self.streams.pop(sid, None)) is not None:
                    stream.scope.cancel()
            case Hold(token=token):
                self.holds[token] = release = anyio.Event()
                await self.tg.start(self._hold, token, release)
            case Release(token=token):
                if (release := self.holds.pop(token, None)) is not None:
                    release.set()
            case SetVersion(version=version, servers=servers):
                if self.pool is not None:
                    mine = None if servers is None else local_servers(self.spec, servers, len(self.pool.servers))
                    self.pool.set_weight_version(version, mine)
                # Once a sync, while the servers are paused, as the trainer does once a step:
                # the cycles that freezing survivors kept (rollout/_runtime.py).
                collect_frozen_garbage()
            case TakeOut(servers=servers):
                if self.pool is not None:
                    for index in local_servers(self.spec, servers, len(self.pool.servers)):
                        self.pool.set_up(index, False)
            case Barrier(token=token):
                self.out.send_nowait(frame(Passed(token=token, report=self.report())))

    async def _run(self, open_: Open, stream: _Stream, problems: MemoryObjectReceiveStream[Problem]) -> None:
        with stream.scope:
            async with self.engine.stream(
                problems,
                open_.n,
                sampling=open_.sampling,
                max_turns=open_.max_turns,
                max_response_tokens=open_.max_response_tokens,
                finished=stream.finished,
                on_trajectory=partial(self._trajectory, open_.stream),
            ) as groups:
                async for group in groups:
                    for i in range(open_.n):
                        stream.finished.pop((group.problem.id, i), None)
                    self.out.send_nowait(frame(GroupDone(stream=open_.stream, key=group.problem.id, report=self.report())))
        if self.streams.get(open_.stream) is stream:
            del self.streams[open_.stream]

    def _trajectory(self, sid: int, trajectory: Trajectory) -> None:
        self.out.send_nowait(frame(TrajectoryDone(stream=sid, trajectory=trajectory)))

    async def _hold(self, token: int, release: anyio.Event, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with contextlib.nullcontext() if self.pool is None else self.pool.held():
            self.out.send_nowait(frame(Held(token=token)))
            task_status.started()
            await release.wait()


async def serve(inp: int, out: int) -> None:
    """Read the spec, build the stack, serve until EOF on ``inp``."""
    reader, writer = _Pipe(inp), _Pipe(out)
    spec = SPEC_DECODER.decode(await reader.receive_frame())
    factory: ShardFactory = load_object(spec.factory, field="ShardSpec.factory")
    tune_gc()  # a worker runs rollouts and nothing else; what its factory builds is frozen at the first pass
    async with factory(spec) as stack, anyio.create_task_group() as tg:
        worker = _Worker(spec, stack, tg)
        tg.start_soon(worker.write, writer)
        worker.out.send_nowait(frame(Ready(capacity=stack.engine.config.max_in_flight)))
        tg.start_soon(worker.report_every)
        try:
            while True:
                await worker.handle(TO_WORKER.decode(await reader.receive_frame()))
        except anyio.EndOfStream:
            pass  # the parent is done with us
        tg.cancel_scope.cancel()


def main() -> None:
    inp, out = os.dup(0), os.dup(1)  # not inherited by children (dup's default)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    anyio.run(serve, inp, out, backend_options=RUN_OPTIONS)


if __name__ == "__main__":
    main()
