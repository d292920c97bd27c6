"""Wire types of the sandbox: what a call returns.

These cross process boundaries (worker pipe, HTTP service), so they are frozen
msgspec structs; new fields go at the end with defaults.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Status = Literal["ok", "error", "timeout", "killed", "output_limit", "internal"]
"""Outcome of one call.

- ``ok``: the code exited 0.
- ``error``: the code exited non-zero (an exception, ``sys.exit(1)``...).
- ``timeout``: the wall-clock or CPU deadline passed; the process group was killed.
- ``killed``: a signal ended it (memory limit, seccomp violation, ...).
- ``output_limit``: stdout+stderr passed the cap; the process group was killed.
- ``internal``: the sandbox itself failed (worker died twice, pool closed under the call).
"""


class ExecResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The one result every sandbox call gets.  Travels worker -> pool -> caller.

    Invariants: ``stdout``/``stderr`` are already truncated to the configured cap;
    ``exit_code`` is None when no exit status exists (timeout, internal);
    ``duration_s`` is the wall time of the call as the pool saw it.
    """

    status: Status
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"
