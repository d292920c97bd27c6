"""The grading worker process, and the wire protocol the reward speaks with it.

math-verify times itself out with ``signal.alarm``, which works only in the main
thread, and some comparisons run in C code no alarm can interrupt.  So grading runs
in a child process, ``python -m rstar2_async._grade_worker``, which the parent kills
when it overruns; see `rstar2_async.reward` for the owners of these processes.

Protocol over the child's stdin/stdout, one request at a time: each message is a
4-byte big-endian length followed by msgpack.  The child first sends one
`GradeReply` once math-verify is imported and warm (its readiness signal), then
answers every `GradeRequest` with one `GradeReply`.  EOF on stdin ends the child.

Importing this module imports neither math-verify nor sympy: the parent needs only
the protocol.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
from typing import BinaryIO

import msgspec

HEADER = struct.Struct(">I")
"""Frame header: payload length in bytes."""


class GradeRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Parent -> worker: is `answer` the same as `gold`?

    Both are final answers (the inside of a box), at most
    `answer_norm.MAX_ANSWER_CHARS` characters each.  `alarm_s` is math-verify's own
    timeout, in whole seconds, for each of its three steps (parse gold, parse
    answer, compare); 0 turns it off and leaves the parent's kill as the only limit.
    """

    answer: str
    gold: str
    alarm_s: int


class GradeReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Worker -> parent: the verdict.  `error` names an exception math-verify raised
    (the verdict is then False); empty otherwise."""

    correct: bool
    error: str = ""


REQUEST_DECODER = msgspec.msgpack.Decoder(GradeRequest)
REPLY_DECODER = msgspec.msgpack.Decoder(GradeReply)
ENCODER = msgspec.msgpack.Encoder()


def frame(message: GradeRequest | GradeReply) -> bytes:
    """One length-prefixed message, ready to write."""
    payload = ENCODER.encode(message)
    return HEADER.pack(len(payload)) + payload


def verify_answer(answer: str, gold: str, alarm_s: int) -> GradeReply:
    """Grade with math-verify, in this process.  Main thread only when `alarm_s` > 0.

    Both sides are parsed as ``\\boxed{...}`` so that math-verify reads them as the
    final answers they are, whatever else they contain.
    """
    from math_verify import parse, verify

    limit = alarm_s if alarm_s > 0 else None
    try:
        gold_parsed = parse("\\boxed{" + gold + "}", parsing_timeout=limit)
        answer_parsed = parse("\\boxed{" + answer + "}", parsing_timeout=limit)
        correct = bool(gold_parsed and answer_parsed) and verify(
            gold_parsed, answer_parsed, timeout_seconds=limit
        )
    except Exception as exc:  # math-verify swallows most errors itself; be sure
        return GradeReply(correct=False, error=f"{type(exc).__name__}: {exc}")
    return GradeReply(correct=bool(correct))


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def main() -> None:
    """Serve requests on stdin/stdout until EOF."""
    # The protocol owns fd 1: anything else printing (sympy, antlr warnings) goes
    # to stderr instead of corrupting a frame.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    # A timeout or parse failure is a verdict (0.0), not news for the log.
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    stdin = sys.stdin.buffer
    # Readiness: import and warm sympy now, so no request pays for it.
    out.write(frame(verify_answer("1", "1", alarm_s=0)))
    while (header := _read_exactly(stdin, HEADER.size)) is not None:
        (size,) = HEADER.unpack(header)
        payload = _read_exactly(stdin, size)
        if payload is None:
            return
        request = REQUEST_DECODER.decode(payload)
        out.write(frame(verify_answer(request.answer, request.gold, request.alarm_s)))


if __name__ == "__main__":
    main()
