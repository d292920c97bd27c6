"""States, misuse, start-up refusal, and no process left behind."""

from __future__ import annotations

import anyio
import pytest

from sandbox import PoolState, SandboxClosed, SandboxPool, SandboxUnavailable, _jail, pool_processes
from sandbox._jail import HostSupport

from ._helpers import config, project_file, wait_until

pytestmark = pytest.mark.anyio


async def test_states_and_misuse() -> None:
    pool = SandboxPool(config(workers=1))
    assert pool.state is PoolState.UNOPENED
    with pytest.raises(RuntimeError, match="not open"):
        await pool.run("print(1)")
    async with pool:
        assert pool.state is PoolState.OPEN
        with pytest.raises(ValueError, match="timeout"):
            await pool.run("print(1)", timeout=0)
        with pytest.raises(RuntimeError, match="single-use"):
            await pool.__aenter__()
    assert pool.state is PoolState.CLOSED
    assert pool.statistics().state == "closed"
    with pytest.raises(SandboxClosed):
        await pool.run("print(1)")
    with pytest.raises(RuntimeError, match="closed"):
        async with pool:
            pass


async def test_no_process_left_after_exit() -> None:
    async with SandboxPool(config()) as pool:
        await wait_until(lambda: len(pool_processes(pool.id)) == 2 * 4)  # bwrap, init, worker, next child
        await pool.run("print(1)")
    assert pool_processes(pool.id) == []


async def test_no_process_left_when_surrounding_scope_is_cancelled() -> None:
    results = []
    with anyio.CancelScope() as scope:
        async with SandboxPool(config()) as pool:

            async def call() -> None:
                results.append(await pool.run("import time; time.sleep(30)", timeout=40))

            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(call)
                await wait_until(lambda: pool.statistics().workers_busy == 2)
                scope.cancel()
    assert scope.cancelled_caught
    assert results == []  # cancelled callers get no result: they are gone
    assert pool_processes(pool.id) == []


async def test_queued_calls_get_internal_when_pool_closes() -> None:
    results = []

    async def call(pool: SandboxPool, code: str) -> None:
        results.append(await pool.run(code, timeout=30))

    async with anyio.create_task_group() as tg:  # the callers outlive the pool
        async with SandboxPool(config(workers=1)) as pool:
            tg.start_soon(call, pool, "import time; time.sleep(30)")
            await wait_until(lambda: pool.statistics().workers_busy == 1)
            for _ in range(3):
                tg.start_soon(call, pool, "print(1)")
            await wait_until(lambda: pool.statistics().queue_depth == 3)
    assert [r.status for r in results] == ["internal"] * 4
    assert all("pool closed" in r.stderr for r in results)
    assert pool_processes(pool.id) == []


def test_refuses_to_start_without_a_jail() -> None:
    host = HostSupport(bwrap=None, userns_error=None, landlock_abi=0, seccomp_error="no table for 'mips'")
    with pytest.raises(SandboxUnavailable) as info:
        _jail.resolve_layers(config(), host)
    message = str(info.value)
    assert "bubblewrap is not installed" in message and "Landlock" in message and "seccomp" in message
    assert "sandbox.insecure" in message
    nouserns = HostSupport(bwrap="/usr/bin/bwrap", userns_error="No permissions to create new namespace", landlock_abi=3, seccomp_error=None)
    with pytest.raises(SandboxUnavailable, match="user namespaces"):
        _jail.resolve_layers(config(), nouserns)
    assert _jail.resolve_layers(config(insecure=True), host) == {"jail": False, "landlock": False, "seccomp": False}


async def test_insecure_mode_without_bubblewrap_still_confines_calls(monkeypatch) -> None:
    real = _jail.check_host()
    monkeypatch.setattr(_jail, "check_host", lambda bwrap=None: HostSupport(None, None, real.landlock_abi, real.seccomp_error))
    async with SandboxPool(config(workers=1, insecure=True)) as pool:
        assert pool.statistics().layers == {"jail": False, "landlock": True, "seccomp": True}
        ok = await pool.run("print(sum(range(10)))")
        read = await pool.run(f"print(open({project_file()!r}).read())")
        net = await pool.run("import socket; socket.socket()")
    assert ok.stdout == "45\n"
    assert read.status == "error" and "PermissionError" in read.stderr
    assert net.status == "error" and "PermissionError" in net.stderr
    assert pool_processes(pool.id) == []
