"""A short sandbox soak (benchmarks/sandbox_soak.py): mixed calls from 16 clients while
workers are SIGKILLed and SIGSTOPped; every call answered exactly once, nothing leaked.
And the pool retries a replacement that dies while it starts."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from rstar2_async.testing import sandbox_soak
from sandbox import SandboxBroken, SandboxPool, worker_pids

from ._helpers import config, wait_until

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_short_soak_under_chaos_loses_and_leaks_nothing() -> None:
    out = await sandbox_soak(300, workers=2, chaos=True, time_budget_s=120.0, seed=1)
    assert out["sent"] == 300 and out["answered"] == out["answered_once"] == 300 and out["cut_by_budget"] == 0
    assert (out["lost"], out["duplicated"], out["leaked_fds"], out["leaked_procs"], out["alive"]) == (0, 0, 0, 0, True)
    assert out["signals"].get("SIGKILL", 0) >= 1 and out["workers_replaced"] >= 1
    # a worker's death shows in a call only as `internal`, when it died under both attempts
    assert set(out["status"]["quick"]) <= {"ok", "internal"} and out["status"]["sympy"].keys() <= {"ok", "internal"}


async def test_a_replacement_killed_while_starting_is_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    async with SandboxPool(config(workers=1)) as pool:
        spawn = pool._spawn
        failures = []

        async def flaky_spawn(index: int):  # type: ignore[no-untyped-def]
            if len(failures) < 2:
                failures.append(index)
                raise SandboxBroken("sandbox worker died while starting (test double)")
            return await spawn(index)

        monkeypatch.setattr(pool, "_spawn", flaky_spawn)
        (victim,) = worker_pids(pool.id)
        os.kill(victim, signal.SIGKILL)
        result = await pool.run("print(1 + 1)")
        await wait_until(lambda: pool.statistics().workers_alive == 1)
    assert failures == [0, 0] and result.stdout == "2\n"


async def test_a_slot_gives_up_after_its_start_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SandboxBroken, match="could not be replaced"):
        async with SandboxPool(config(workers=1)) as pool:

            async def broken_spawn(index: int):  # type: ignore[no-untyped-def]
                raise SandboxBroken("no interpreter (test double)")

            monkeypatch.setattr(pool, "_spawn", broken_spawn)
            (victim,) = worker_pids(pool.id)
            os.kill(victim, signal.SIGKILL)
            with anyio.fail_after(30):
                await pool.run("print(1)")
