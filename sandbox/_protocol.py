"""The one interface the rollout core needs from code execution."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._types import ExecResult


@runtime_checkable
class Sandbox(Protocol):
    """Anything that runs a Python snippet and answers with exactly one result.

    ``run`` never raises for anything the code does: failures of the code are
    statuses in :class:`ExecResult`.  It may raise ``anyio.get_cancelled_exc_class()``
    when the caller is cancelled, and :class:`sandbox.SandboxClosed` when used after
    close.
    """

    async def run(self, code: str, stdin: str = "", timeout: float = 4.0) -> ExecResult: ...
