"""Faults underneath the pool: every call still gets exactly one result."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from sandbox import SandboxPool

from ._helpers import config, pool_processes, wait_until, worker_pids

pytestmark = pytest.mark.anyio


async def test_worker_killed_mid_call_is_replaced_and_call_retried() -> None:
    async with SandboxPool(config(workers=1)) as pool:
        result = None

        async def call() -> None:
            nonlocal result
            result = await pool.run("import time; time.sleep(0.5); print('done')", timeout=5)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await wait_until(lambda: pool.statistics().workers_busy == 1)
            (victim,) = worker_pids(pool.id)
            os.kill(victim, signal.SIGKILL)
        stats = pool.statistics()
        after = await pool.run("print('still here')")
    assert result is not None and result.status == "ok" and result.stdout == "done\n", result
    assert stats.retries == 1 and stats.worker_failures == 1 and stats.worker_starts == 2
    assert after.stdout == "still here\n"


async def test_call_gets_internal_when_both_attempts_die() -> None:
    async with SandboxPool(config(workers=1)) as pool:
        result = None

        async def call() -> None:
            nonlocal result
            result = await pool.run("import time; time.sleep(10)", timeout=20)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            for starts in (1, 2):
                await wait_until(lambda: pool.statistics().worker_starts == starts and len(worker_pids(pool.id)) == 1)
                await wait_until(lambda: pool.statistics().workers_busy == 1)
                os.kill(worker_pids(pool.id)[0], signal.SIGKILL)
        after = await pool.run("print(1)")
    assert result is not None and result.status == "internal" and "retried once" in result.stderr
    assert after.status == "ok"


async def test_hung_worker_is_killed_and_call_retried() -> None:
    async with SandboxPool(config(workers=1, hang_grace_s=0.5)) as pool:
        (victim,) = worker_pids(pool.id)
        os.kill(victim, signal.SIGSTOP)  # the worker hangs: it will never answer
        result = await pool.run("print('ok')", timeout=0.5)
        stats = pool.statistics()
    assert result.status == "ok" and result.stdout == "ok\n"
    assert stats.retries == 1 and stats.worker_failures == 1


async def test_worker_dying_while_idle_is_replaced_at_once() -> None:
    async with SandboxPool(config(workers=1)) as pool:
        (victim,) = worker_pids(pool.id)
        os.kill(victim, signal.SIGKILL)
        await wait_until(lambda: pool.statistics().worker_starts == 2 and pool.statistics().workers_alive == 1)
        result = await pool.run("print('fresh')")
        stats = pool.statistics()
    assert result.stdout == "fresh\n" and stats.retries == 0 and stats.worker_failures == 1


async def test_exhausted_queue_answers_every_call_once() -> None:
    async with SandboxPool(config(workers=1, max_queue=5)) as pool:
        results: dict[int, list] = {i: [] for i in range(40)}

        async def call(i: int) -> None:
            results[i].append(await pool.run(f"print({i})"))

        async with anyio.create_task_group() as tg:
            for i in range(40):
                tg.start_soon(call, i)
    assert all(len(r) == 1 for r in results.values())
    statuses = {r[0].status for r in results.values()}
    assert statuses == {"ok", "internal"}
    for i, (r,) in results.items():
        if r.status == "ok":
            assert r.stdout == f"{i}\n"
        else:
            assert "queue full" in r.stderr


async def test_recycled_workers_keep_serving() -> None:
    async with SandboxPool(config(workers=1, recycle_after=3)) as pool:
        outs = [(await pool.run(f"print({i})")).stdout for i in range(7)]
        stats = pool.statistics()
        await wait_until(lambda: len(pool_processes(pool.id)) == 4)  # bwrap, its init, the worker, the next child
    assert outs == [f"{i}\n" for i in range(7)]
    assert stats.worker_starts == 3 and stats.worker_failures == 0
