"""The parent's handle on one shard worker process: start, frames in and out, stop.

The worker's stderr comes through the parent (copied to the parent's own stderr
as it arrives), so that the end of it can go into a :class:`ShardError`.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final, final

import anyio
import anyio.abc
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream

from .._paths import child_env
from ..errors import ShardError
from ._shard_wire import FROM_WORKER, HEADER, FromWorker, Ready, ShardSpec, ToWorker, frame

__all__ = ["HANG_TIMEOUT_S", "START_TIMEOUT_S", "STOP_GRACE_S", "ShardProcess"]

START_TIMEOUT_S: Final = 600.0
"""Limit on a worker's start (interpreter, imports, its factory's stack: a factory
may launch servers, which takes minutes)."""

STOP_GRACE_S: Final = 10.0
"""How long a worker may take to close its stack after EOF on its stdin (or to exit
after it closed its stdout) before it is terminated, then killed."""

HANG_TIMEOUT_S: Final = 60.0
"""A ready worker silent this long is hung (it reports every second, and its loop's
longest stalls measured at paper scale on two shared cores were ~5 s): it is killed
and started again, as one that died."""

TAIL_BYTES: Final = 4096
"""How much of a worker's stderr a :class:`ShardError` quotes."""

WORKER_MODULE: Final = "rstar2_async.rollout._shard_worker"

# What reading from or writing to a worker that died raises.
GONE = (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@final
class ShardProcess:
    """One worker process.  :meth:`open` owns it: leaving its block stops it (EOF,
    a grace, then SIGTERM, then SIGKILL) and reaps it, however the block ends."""

    def __init__(self, process: anyio.abc.Process, spec: ShardSpec) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.spec = spec
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._out, self._queue = anyio.create_memory_object_stream[bytes](math.inf)
        self._tail = bytearray()
        self._tail_done = anyio.Event()
        self.hung = False  # killed by messages() for its silence
        self._ready = False  # until then it builds its stack and reads no EOF: stopping it skips the grace

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, spec: ShardSpec, python: str, env: Mapping[str, str] | None) -> AsyncIterator[ShardProcess]:
        """Start the worker for ``spec`` and send it the spec (not yet :meth:`ready`).

        Raises:
            ShardError: the interpreter cannot be started.
        """
        command: Sequence[str] = [python, "-m", WORKER_MODULE]
        try:
            process = await anyio.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(env)
            )
        except OSError as exc:
            raise ShardError(f"shard worker {spec.shard}: cannot start {python}: {exc}", shard=spec.shard, exit_code=None, stderr_tail="") from exc
        worker = cls(process, spec)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker._copy_stderr)
                tg.start_soon(worker._write, worker._queue)
                worker.send(spec)
                yield worker
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await worker._stop()

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, message: ToWorker | ShardSpec) -> None:
        """Queue ``message`` (never blocks; frames go out in order).  Dropped if the
        worker's input is closed: whoever restarts it sends what it must know."""
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._out.send_nowait(frame(message))

    def close_input(self) -> None:
        """EOF on the worker's stdin once what is queued is written: the worker closes its stack and exits."""
        self._out.close()

    async def ready(self) -> Ready:
        """The worker's first message, once its factory's stack is up.

        Raises:
            ShardError: it exited or closed its stdout first, sent something else,
                or took longer than :data:`START_TIMEOUT_S`.
        """
        try:
            with anyio.fail_after(START_TIMEOUT_S):
                first = await self._receive()
        except TimeoutError:
            raise await self.failure(f"not ready after {START_TIMEOUT_S:.0f} s") from None
        except (*GONE, msgspec.DecodeError):
            raise await self.failure("exited before it was ready") from None
        if not isinstance(first, Ready):
            raise await self.failure(f"sent {type(first).__name__} before Ready")
        self._ready = True
        return first

    async def messages(self, silence_s: float = HANG_TIMEOUT_S) -> AsyncIterator[FromWorker]:
        """What the worker sends, until it closes its stdout (exits or dies).  A
        frame that does not decode counts as a death too (the worker is broken), and
        so does ``silence_s`` without a frame: the worker is killed (``hung``)."""
        while True:
            try:
                with anyio.fail_after(silence_s):
                    message = await self._receive()
            except TimeoutError:
                self.hung = True
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                return
            except (*GONE, msgspec.DecodeError):
                return
            yield message

    async def failure(self, what: str) -> ShardError:
        """A :class:`ShardError` for this worker: ``what`` happened; its exit code
        (once it exited, within :data:`STOP_GRACE_S`) and the end of its stderr."""
        with anyio.move_on_after(STOP_GRACE_S):
            await self.process.wait()
        with anyio.move_on_after(1.0):  # the last lines it wrote may still be in the pipe
            await self._tail_done.wait()
        code, tail = self.process.returncode, self._tail.decode(errors="replace")
        return ShardError(
            f"shard worker {self.spec.shard} (pid {self.pid}, {self.spec.factory}) {what}; exit code {code}; "
            f"its stderr ends:\n{tail}",
            shard=self.spec.shard,
            exit_code=code,
            stderr_tail=tail,
        )

    async def _receive(self) -> FromWorker:
        (size,) = HEADER.unpack(await self._stdout.receive_exactly(HEADER.size))
        return FROM_WORKER.decode(await self._stdout.receive_exactly(size))

    async def _write(self, queue: MemoryObjectReceiveStream[bytes]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            async with queue:
                async for data in queue:
                    await stdin.send(data)
            await stdin.aclose()
        except GONE:
            return  # it died: the reader sees EOF and the supervisor restarts it

    async def _copy_stderr(self) -> None:
        assert self.process.stderr is not None
        try:
            async for chunk in self.process.stderr:
                os.write(2, chunk)
                self._tail += chunk
                del self._tail[:-TAIL_BYTES]
        except GONE:
            pass
        finally:
            self._tail_done.set()

    async def _stop(self) -> None:
        """EOF, a grace (for a ready worker: one still starting reads no EOF), SIGTERM,
        a grace, SIGKILL; reaped.  Call shielded, once the writer task has ended."""
        self._out.close()
        assert self.process.stdin is not None
        with contextlib.suppress(*GONE):  # the EOF itself: the writer may have been cancelled before sending it
            await self.process.stdin.aclose()
        if self.process.returncode is None and self._ready:
            with anyio.move_on_after(STOP_GRACE_S):
                await self.process.wait()
        for signal in (self.process.terminate, self.process.kill):
            if self.process.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                signal()
            with anyio.move_on_after(2.0):
                await self.process.wait()
        await self.process.aclose()
