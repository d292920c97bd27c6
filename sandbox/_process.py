"""One warm worker process, seen from the pool: start it, send it calls, end it.

The worker speaks length-prefixed JSON frames on its stdin/stdout (see
``_worker.py``).  This module turns every way a worker can fail (exit, broken
pipe, garbage) into :class:`WorkerDied`, which the pool handles by replacing
the worker; nothing here retries.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import struct
import subprocess

import anyio
import msgspec
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from ._errors import SandboxBroken
from ._jail import WorkerSpec
from ._procs import stat_fields
from ._types import Status

_HEADER = struct.Struct(">I")


class CallFrame(msgspec.Struct, frozen=True):
    """pool -> worker: one call."""

    id: int
    code: str
    stdin: str
    timeout: float


class ReplyFrame(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """worker -> pool: the answer to the call with the same ``id``."""

    id: int
    status: Status
    stdout: str
    stderr: str
    exit_code: int | None
    duration_s: float


_encode = msgspec.json.Encoder().encode
_decode_reply = msgspec.json.Decoder(ReplyFrame).decode


class WorkerDied(Exception):
    """The worker exited, closed its pipes or answered garbage (internal to the pool)."""


class WorkerProcess:
    """A started, ready worker.  Owned by one pool slot; not safe to share.

    Resource handling: :meth:`aclose` kills the process (and so, through
    bubblewrap's ``--die-with-parent`` and the pid namespace, everything in its
    jail) and waits for it; it is idempotent and safe under cancellation.
    """

    def __init__(self, process: Process, spec: WorkerSpec) -> None:
        self.process = process
        self.spec = spec
        self.calls = 0
        self._out = BufferedByteReceiveStream(process.stdout)  # type: ignore[arg-type]
        self._closed = False
        self._init_pidfd: int | None = None  # bubblewrap's init: pid 1 of the jail's pid namespace
        self._interpreter: tuple[int, int] | None = None  # (host pid, pidfd) of the worker interpreter

    @property
    def pid(self) -> int:
        """Host pid of the outermost process (bubblewrap, or the worker when not jailed)."""
        return self.process.pid

    @classmethod
    async def start(cls, spec: WorkerSpec, start_timeout: float) -> WorkerProcess:
        """Start a worker and wait until it has imported its preloads.

        Raises:
            SandboxBroken: it could not start, or did not become ready in time;
                the message carries its stderr.
        """
        process = await anyio.open_process(
            spec.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        worker = cls(process, spec)
        try:
            with anyio.fail_after(start_timeout):
                await worker._send(_encode(spec.setup))
                ready = msgspec.json.decode(await worker._receive())
        except (WorkerDied, TimeoutError, msgspec.DecodeError) as e:
            worker._kill()
            detail = await worker._stderr_tail()
            await worker.aclose()
            why = "did not become ready in time" if isinstance(e, TimeoutError) else "exited during start-up"
            raise SandboxBroken(f"sandbox worker {why}: {detail or e!r}\ncommand: {' '.join(spec.argv)}") from e
        except BaseException:
            await worker.aclose()
            raise
        if not ready.get("ready"):
            await worker.aclose()
            raise SandboxBroken(f"sandbox worker failed to load its preloads: {ready.get('error')}")
        if spec.layers.get("jail"):
            init = _child_pidfd(process.pid)
            if init is not None:
                worker._init_pidfd = init[1]
                worker._interpreter = _child_pidfd(init[0])
        else:
            worker._interpreter = _child_pidfd(os.getpid(), only=process.pid)
        return worker

    async def call(self, frame: CallFrame) -> ReplyFrame:
        """Send one call and wait for its reply (no time limit: the caller owns the budget).

        Raises:
            WorkerDied: the worker is gone or broke the protocol.
        """
        await self._send(_encode(frame))
        try:
            reply = _decode_reply(await self._receive())
        except msgspec.DecodeError as e:
            raise WorkerDied(f"undecodable reply: {e}") from e
        if reply.id != frame.id:
            raise WorkerDied(f"reply to call {reply.id}, expected {frame.id}")
        self.calls += 1
        return reply

    def alive(self) -> bool:
        """Whether the worker interpreter is there to answer: not exited, not stopped.

        ``process.returncode`` is not enough: it is set only once the event loop has
        reaped bubblewrap, after the interpreter and bubblewrap's init have exited, so
        a worker killed a moment ago still looks alive there.  The interpreter's
        pidfd says that it exited (and pins its pid, so ``/proc`` names it and no
        recycled one); ``/proc`` says whether it is stopped (SIGSTOP), exiting (a
        large interpreter takes a while to tear down its memory) or has a SIGKILL or
        SIGSTOP pending that it has not yet run to act on.
        """
        if self.process.returncode is not None or self._closed:
            return False
        if self._interpreter is None:  # not found at start: only the reaped exit tells
            return True
        pid, fd = self._interpreter
        if select.select([fd], [], [], 0)[0]:  # a pidfd is readable once its process exited
            return False
        return not _dying(pid)

    async def wait_exit(self) -> int:
        """Return once the worker process has exited (for whatever reason)."""
        return await self.process.wait()

    async def aclose(self) -> None:
        """Kill the worker and its jail, wait until every process in it is gone,
        remove its host scratch.  Idempotent; shielded from cancellation.

        In the jail, killing bubblewrap's init (pid 1 of the namespace) makes the
        kernel kill everything else in the namespace before init itself exits, so
        waiting for init to exit is waiting for the whole jail.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._init_pidfd is None and self.process.returncode is None:
                # Not jailed: no pid namespace takes our children down with us, so ask
                # the worker to end them itself (it does on end of input), briefly.
                try:
                    await self.process.stdin.aclose()  # type: ignore[union-attr]
                except (anyio.BrokenResourceError, OSError):
                    pass
                with anyio.move_on_after(2.0):
                    await self.process.wait()
            self._kill()
            await self.process.wait()
            if self._init_pidfd is not None:
                await anyio.to_thread.run_sync(_wait_fd, self._init_pidfd, 30.0)
                os.close(self._init_pidfd)
            if self._interpreter is not None:
                os.close(self._interpreter[1])
            await self.process.aclose()
            if self.spec.scratch_host:
                await anyio.to_thread.run_sync(shutil.rmtree, self.spec.scratch_host, True)

    def _kill(self) -> None:
        if self._init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.process.returncode is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    async def _send(self, data: bytes) -> None:
        try:
            await self.process.stdin.send(_HEADER.pack(len(data)) + data)  # type: ignore[union-attr]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as e:
            raise WorkerDied(f"cannot write to worker: {e!r}") from e

    async def _receive(self) -> bytes:
        try:
            head = await self._out.receive_exactly(4)
            return await self._out.receive_exactly(_HEADER.unpack(head)[0])
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError) as e:
            raise WorkerDied(f"worker closed its output (exit status {self.process.returncode})") from e

    async def _stderr_tail(self) -> str:
        chunks: list[bytes] = []
        with anyio.move_on_after(1.0):
            try:
                async for chunk in self.process.stderr:  # type: ignore[union-attr]
                    chunks.append(chunk)
            except (anyio.BrokenResourceError, OSError):
                pass
        return b"".join(chunks).decode(errors="replace")[-2000:].strip()


def _child_pidfd(pid: int, only: int | None = None) -> tuple[int, int] | None:
    """(host pid, pidfd) of the (single) child of ``pid`` (or of its child ``only``),
    or None if it has none (it died)."""
    if only is not None:
        children = [str(only)]
    else:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = f.read().split()
        except OSError:
            children = [e for e in os.listdir("/proc") if e.isdigit() and _ppid(e) == pid]
    for child in children:
        try:
            fd = os.pidfd_open(int(child))
        except OSError:
            continue
        if _ppid(child) == pid:  # still ours after opening: not a recycled pid
            return int(child), fd
        os.close(fd)
    return None


def _ppid(pid: str) -> int:
    fields = stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else -1


_PF_EXITING = 0x4  # include/linux/sched.h: the task is in do_exit
_PENDING_BITS = 1 << (signal.SIGKILL - 1) | 1 << (signal.SIGSTOP - 1)
"""SIGKILL or SIGSTOP sent but not yet acted on: a loaded machine can leave a sleeping
worker in state ``S`` for milliseconds after a SIGSTOP, long enough to be handed out."""


def _dying(pid: int) -> bool:
    """Gone, stopped, exiting, or with a SIGKILL or SIGSTOP pending (the kernel has not
    yet run it to act on it)."""
    fields = stat_fields(str(pid))
    if len(fields) < 7 or fields[0] in ("T", "t", "Z", "X", "x") or int(fields[6]) & _PF_EXITING:
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            pending = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, IndexError, ValueError):
        return True
    return any(mask & _PENDING_BITS for mask in pending)


def _wait_fd(fd: int, timeout: float) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll(timeout * 1000)
