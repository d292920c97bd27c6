"""The worker's wire format: frames of a 4-byte big-endian length and UTF-8 JSON.

Standard library only: copied into the jail with the worker (see ``_worker.py``).
"""

from __future__ import annotations

import json
import os
import struct

HEADER = struct.Struct(">I")


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        b = os.read(fd, n)
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def read_frame(fd: int) -> dict | None:
    """The next frame on ``fd``, or None at end of input."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


def write_frame(fd: int, obj: dict) -> None:
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]
