"""The grading worker process: its wire protocol, the child's loop, the parent's handles.

math-verify times itself out with ``signal.alarm``, which works only in the main
thread, and some comparisons run in C code no alarm can interrupt; a user's reward
function may hang or crash too.  So grading runs in a child process,
``python -m rstar2_async.reward [--function module:name]``, which the parent
kills when it overruns.  `SyncWorker` (blocking, for `reward.score`) and `AsyncWorker`
(anyio, for `reward.Grader`) are the parent's handles on one child each; the owners
of those handles decide when to kill.

Protocol over the child's stdin/stdout, one request at a time: each message is a
4-byte big-endian length followed by msgpack.  The math worker first sends one
`GradeReply` once math-verify is imported and warm (its readiness signal), then
answers every `GradeRequest` with one `GradeReply`.  A function worker first sends a
`RewardReply` (``error`` empty once the function imported), then answers every
`RewardRequest` with one `RewardReply`.  EOF on stdin ends the child.

Importing this module imports neither math-verify nor sympy (the child imports them
in `math_verify_verdict`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import BinaryIO, final

import anyio
import anyio.abc
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream

from .._paths import child_env
from ..errors import GraderBrokenError
from ..types import Problem
from ._verify import math_verify_verdict

HEADER = struct.Struct(">I")
"""Frame header: payload length in bytes."""


class GradeRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Parent -> worker: is `answer` the same as `gold`?

    Both are final answers (the inside of a box), at most
    `MAX_ANSWER_CHARS` (``_normalise``) characters each.  `alarm_s` is math-verify's own
    timeout, in whole seconds, for each of its three steps (parse gold, parse
    answer, compare); 0 turns it off and leaves the parent's kill as the only limit.
    """

    answer: str
    gold: str
    alarm_s: int
    rel_tol: float = 0.0
    """When math-verify says no, two constant real values this close (relative) are
    still equal, and so are tuples, sets, matrices and intervals entry by entry
    (lenient mode's `LENIENT_REL_TOL`, for a decimal against ``\\sqrt{2}`` or
    ``\\pi``); 0.0: math-verify's verdict stands."""


class GradeReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Worker -> parent: the verdict.  `error` names an exception math-verify raised
    (the verdict is then False); empty otherwise."""

    correct: bool
    error: str = ""


class RewardRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Parent -> function worker: what is ``response_text`` worth for ``problem``?"""

    response_text: str
    problem: Problem


class RewardReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Function worker -> parent: the reward.  ``error`` names what the function raised
    or returned instead of a finite number (``value`` is then 0.0); empty otherwise."""

    value: float
    error: str = ""


REQUEST_DECODER = msgspec.msgpack.Decoder(GradeRequest)
REPLY_DECODER = msgspec.msgpack.Decoder(GradeReply)
REWARD_REQUEST_DECODER = msgspec.msgpack.Decoder(RewardRequest)
REWARD_REPLY_DECODER = msgspec.msgpack.Decoder(RewardReply)
ENCODER = msgspec.msgpack.Encoder()


def frame(message: GradeRequest | GradeReply | RewardRequest | RewardReply) -> bytes:
    """One length-prefixed message, ready to write."""
    payload = ENCODER.encode(message)
    return HEADER.pack(len(payload)) + payload


def verify_answer(answer: str, gold: str, alarm_s: int, rel_tol: float = 0.0) -> GradeReply:
    """`math_verify_verdict` as a reply, its error named in it.  Main thread only when
    `alarm_s` > 0."""
    try:
        return GradeReply(correct=math_verify_verdict(answer, gold, alarm_s, rel_tol))
    except Exception as exc:  # math-verify swallows most errors itself; be sure
        return GradeReply(correct=False, error=f"{type(exc).__name__}: {exc}")


# --- parent side: driving a worker -------------------------------------------------


WORKER_START_TIMEOUT_S = 60.0
"""Limit on starting one worker (interpreter, math-verify and sympy imports, one
warm-up grading).  About 1 s on an idle core; generous for busy CI machines."""


def worker_command(function: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The child's command line and environment: math-verify, or ``function``."""
    command = [sys.executable, "-m", "rstar2_async.reward"]
    if function is not None:
        command += ["--function", function]
    return command, child_env()


@final
class SyncWorker:
    """One worker driven with blocking reads bounded by `select` deadlines."""

    def __init__(self) -> None:
        command, env = worker_command()
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
        except OSError as exc:
            raise GraderBrokenError(f"cannot start a grading worker: {exc}") from exc
        self.owner_pid = os.getpid()
        ready = self._receive(time.monotonic() + WORKER_START_TIMEOUT_S)
        if ready is None or not ready.correct:
            self.kill()
            raise GraderBrokenError(f"grading worker failed its warm-up: {ready}")

    def grade(self, request: GradeRequest, timeout: float) -> GradeReply | None:
        """The reply, or None if the worker overran `timeout` or died."""
        try:
            # Requests are far below a pipe buffer, so this write never blocks.
            os.write(self.process.stdin.fileno(), frame(request))  # type: ignore[union-attr]
        except OSError:
            return None
        return self._receive(time.monotonic() + timeout)

    def _receive(self, deadline: float) -> GradeReply | None:
        header = self._read_exactly(HEADER.size, deadline)
        if header is None:
            return None
        payload = self._read_exactly(HEADER.unpack(header)[0], deadline)
        try:
            return None if payload is None else REPLY_DECODER.decode(payload)
        except msgspec.DecodeError:
            return None

    def _read_exactly(self, n: int, deadline: float) -> bytes | None:
        fd = self.process.stdout.fileno()  # type: ignore[union-attr]
        data = b""
        while len(data) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.stdout.close()  # type: ignore[union-attr]


@final
class AsyncWorker:
    """One worker (math-verify, or a reward function) driven through anyio's
    process streams."""

    def __init__(self, process: anyio.abc.Process, decoder: msgspec.msgpack.Decoder) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._decoder = decoder
        self._killed = False

    @classmethod
    async def start(cls, function: str | None = None) -> AsyncWorker:
        """Start a worker and wait until it is ready (math-verify has graded its
        warm-up, or ``function`` imported).

        Cancellation-safe: a cancelled start kills the half-started process.
        """
        command, env = worker_command(function)
        try:
            process = await anyio.open_process(command, env=env, stderr=None)
        except OSError as exc:
            raise GraderBrokenError(f"cannot start a grading worker: {exc}") from exc
        worker = cls(process, REPLY_DECODER if function is None else REWARD_REPLY_DECODER)
        try:
            with anyio.fail_after(WORKER_START_TIMEOUT_S):
                ready = await worker.receive()
        except Exception as exc:
            await worker.kill()
            raise GraderBrokenError(f"grading worker failed to start: {exc!r}") from exc
        except BaseException:
            await worker.kill()
            raise
        if not (ready.correct if isinstance(ready, GradeReply) else not ready.error):
            await worker.kill()
            raise GraderBrokenError(f"grading worker failed its warm-up: {ready}")
        return worker

    async def grade(self, request: GradeRequest | RewardRequest) -> GradeReply | RewardReply:
        await self._stdin.send(frame(request))
        return await self.receive()

    async def receive(self) -> GradeReply | RewardReply:
        (size,) = HEADER.unpack(await self._stdout.receive_exactly(HEADER.size))
        return self._decoder.decode(await self._stdout.receive_exactly(size))

    async def kill(self) -> None:
        """Kill and reap the process.  Idempotent; shielded, so it finishes even
        when the caller is being cancelled."""
        if self._killed:
            return
        self._killed = True
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.aclose()


# What a worker that died or garbled the protocol mid-call raises at us.
WORKER_FAILURES = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    msgspec.DecodeError,
    OSError,
)


# --- child side -------------------------------------------------------------------


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def reward_reply(value: object) -> RewardReply:
    """What a reward function returned, as a reply: anything but a finite number is
    an error worth 0.0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return RewardReply(value=0.0, error=f"returned {value!r}, expected a finite number")
    return RewardReply(value=float(value))


def call_function(function: Callable[[str, Problem], object], request: RewardRequest) -> RewardReply:
    """One call of a reward function, in this process: an exception is an error reply."""
    try:
        value = function(request.response_text, request.problem)
    except Exception as exc:
        return RewardReply(value=0.0, error=f"{type(exc).__name__}: {exc}")
    return reward_reply(value)


def main(argv: list[str] | None = None) -> None:
    """Serve requests on stdin/stdout until EOF."""
    args = argv if argv is not None else sys.argv[1:]
    # The protocol owns fd 1: anything else printing (sympy, antlr warnings, a
    # reward function's prints) goes to stderr instead of corrupting a frame.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    function = None
    if args[:1] == ["--function"]:
        from .._plugins import load_object

        try:
            function = load_object(args[1], field="reward.function")
        except Exception as exc:
            out.write(frame(RewardReply(value=0.0, error=str(exc))))
            return
        out.write(frame(RewardReply(value=0.0)))  # readiness: imported
    else:
        # A timeout or parse failure is a verdict (0.0), not news for the log.
        logging.getLogger("math_verify").setLevel(logging.CRITICAL)
        # Readiness: import and warm sympy now, so no request pays for it.
        out.write(frame(verify_answer("1", "1", alarm_s=0)))
    while (header := _read_exactly(stdin, HEADER.size)) is not None:
        (size,) = HEADER.unpack(header)
        payload = _read_exactly(stdin, size)
        if payload is None:
            return
        if function is None:
            request = REQUEST_DECODER.decode(payload)
            out.write(frame(verify_answer(request.answer, request.gold, request.alarm_s, request.rel_tol)))
        else:
            out.write(frame(call_function(function, REWARD_REQUEST_DECODER.decode(payload))))
