"""Verifying a weight sync before the pool samples a token from it: every server
scores a fixed probe sequence and its log-probs are compared with the learner's.

A reload can go wrong without any error: a tied output layer kept stale (vLLM CPU,
``_vllm_ext``), a server handed another directory, a load that silently did nothing.
Each of these changes what the server computes, so one prompt scored by every server
(``prompt_logprobs``: a few hundred tokens, one forward pass) catches all of them,
whatever the cause, before the pool admits a turn.

Used by :meth:`backends.WeightSync.sync` (and :meth:`~backends.WeightSync.on_server_back`):
a server beyond the tolerance is reloaded once and scored again; if it still differs
it is taken out of rotation with an error naming it.  The learner's side (the
reference log-probs and the tolerance for its precision) is the caller's: backends
never imports the learner.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import final

import anyio
import msgspec

from ._errors import BackendError
from ._pool_server import PoolServer

__all__ = ["Probe", "ProbeVerdict", "verify_servers"]


@final
class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """A fixed token sequence and the learner's log-probs of it, for one export.

    Invariant: ``len(logprobs) == len(token_ids) - 1`` (the first token has none).
    """

    token_ids: list[int]
    logprobs: list[float]
    """``log p(token_ids[i] | token_ids[:i])`` under the exported weights, ``i >= 1``."""
    tolerance: float
    """The largest ``|server - learner|`` accepted on any token (the caller's, from
    the precision both sides compute in)."""

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.token_ids) - 1:
            raise ValueError(f"Probe: {len(self.logprobs)} log-probs for {len(self.token_ids)} tokens (expected one fewer)")


@final
class ProbeVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`verify_servers` found, by server index."""

    diffs: dict[int, float]
    """Each scored server's largest ``|server - learner|`` on the probe (after its
    reload, for one that needed it); NaN where it could not be scored."""
    retried: list[int]
    """Servers that failed the first check and were reloaded."""
    failed: dict[int, str]
    """Servers that still differ (or could not be scored), with the reason."""

    @property
    def diff_max(self) -> float:
        """The largest difference over the servers that passed (NaN if none did)."""
        passed = [d for i, d in self.diffs.items() if i not in self.failed]
        return max(passed, default=math.nan)


async def verify_servers(
    servers: Sequence[PoolServer], probe: Probe, *, reload: Callable[[PoolServer], Awaitable[None]] | None
) -> ProbeVerdict:
    """Score ``probe`` on every server concurrently; a server beyond
    ``probe.tolerance`` is reloaded once with ``reload(server)`` (when given) and
    scored again.

    Never raises for a server's failure: a server that cannot be scored or reloaded
    fails with the error as its reason.  Cancellation propagates.
    """
    diffs: dict[int, float] = {}
    retried: list[int] = []
    failed: dict[int, str] = {}

    async def one(server: PoolServer) -> None:
        try:
            diff = await _diff(server, probe)
            if not diff <= probe.tolerance and reload is not None:  # NaN fails too
                retried.append(server.index)
                await reload(server)
                diff = await _diff(server, probe)
        except BackendError as exc:
            diffs[server.index] = math.nan
            failed[server.index] = f"server {server.index} ({server.url}): could not be verified: {exc}"
            return
        diffs[server.index] = diff
        if not diff <= probe.tolerance:
            again = " after a reload" if server.index in retried else ""
            failed[server.index] = (
                f"server {server.index} ({server.url}) serves other weights than the learner's: its log-probs of the "
                f"probe differ by up to {diff:.3g} (tolerance {probe.tolerance:.3g}){again} (a stale tied output "
                "layer, another directory, a load that did nothing?)"
            )

    async with anyio.create_task_group() as tg:
        for server in servers:
            tg.start_soon(one, server)
    return ProbeVerdict(diffs=diffs, retried=sorted(retried), failed=failed)


async def _diff(server: PoolServer, probe: Probe) -> float:
    scored = await server.admin.score(server.client.model, probe.token_ids)
    if len(scored) != len(probe.logprobs):
        return math.nan
    return max((abs(s - r) for s, r in zip(scored, probe.logprobs)), default=0.0)
