"""A deadline on every weight sync (``WeightSync(timeout_s=...)``), against vLLM
doubles whose faults are the doubles' own: a server stopped (as by SIGSTOP) before
or during a sync, a broadcast that never ends.  The rest of the fleet takes the
weights, the stopped server is taken out and loaded when it answers again, and a
cancelled sync (SIGTERM) ends without waiting on the stopped server."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest

import backends._weight_sync as weight_sync
from backends import BroadcastTransport, DiskTransport, WeightSync
from rstar2_async.testing import FakeVLLM
from tests.backends.test_weight_sync import CHOREOGRAPHY, FakeRecordingSender, fleet

pytestmark = pytest.mark.anyio


async def until_up(pool, index: int) -> None:  # type: ignore[no-untyped-def]
    with anyio.fail_after(60):  # a bound against a hang, not a timing: the poller's next attempts
        while not pool.is_up(index):
            await anyio.sleep(0.02)


@pytest.mark.parametrize("stopped_at", ["/pause", "/collective_rpc"])
async def test_a_server_stopped_during_a_sync_misses_the_deadline_and_the_rest_go_on(
    stopped_at: str, tmp_path: Path
) -> None:
    fakes = [FakeVLLM(), FakeVLLM()]
    async with fleet(*fakes) as pool:
        original = pool.servers[1].admin.pause if stopped_at == "/pause" else pool.servers[1].admin.load_weights_from_disk

        async def stop_then(*args: object) -> None:
            if not stopped.is_set():  # once: the process stops as the request reaches it
                stopped.set()
                fakes[1].stop()
            await original(*args)  # type: ignore[operator]

        stopped = anyio.Event()

        if stopped_at == "/pause":
            pool.servers[1].admin.pause = stop_then  # type: ignore[method-assign]
        else:
            pool.servers[1].admin.load_weights_from_disk = stop_then  # type: ignore[method-assign]
        sync = WeightSync(pool, DiskTransport(), timeout_s=1.0)
        with anyio.fail_after(60):  # a hang guard: the deadline ends it in about 1 s
            report = await sync.sync(tmp_path, version=3)
        assert (report.servers, report.removed, report.timed_out) == ([0], [1], [1])
        assert fakes[0].paths() == CHOREOGRAPHY and fakes[0].version == "3" and not fakes[0].paused
        assert not pool.is_up(1)
        fakes[1].cont()  # SIGCONT: its pause goes through now; it is resumed and loaded before it is back
        await until_up(pool, 1)
        assert fakes[1].version == "3" and fakes[1].weights == str(tmp_path.resolve()) and not fakes[1].paused


async def test_a_cancelled_sync_ends_without_waiting_on_a_stopped_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM during a sync whose server is stopped mid-load: the sync ends once the
    resumes have had their time, not after the stopped server's 600 s admin calls;
    the healthy server is resumed, the stopped one out of rotation."""
    monkeypatch.setattr(weight_sync, "RESUME_S", 0.2)
    fakes = [FakeVLLM(), FakeVLLM()]
    async with fleet(*fakes) as pool:
        loading = anyio.Event()
        original = pool.servers[1].admin.load_weights_from_disk

        async def stop_then(path: str) -> None:
            fakes[1].stop()
            loading.set()
            await original(path)

        pool.servers[1].admin.load_weights_from_disk = stop_then  # type: ignore[method-assign]
        with anyio.fail_after(60):  # a hang guard: shorter than one admin call's 600 s
            with anyio.CancelScope() as term:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(WeightSync(pool, DiskTransport(), timeout_s=3600).sync, tmp_path, 1)
                    await loading.wait()
                    term.cancel()
        assert not fakes[0].paused and not pool.is_up(1)
        fakes[1].cont()


class FakeStuckSender(FakeRecordingSender):
    """Test double of a collective whose receiver stopped mid-transfer: the second
    tensor never goes out (the thread blocks until the test releases it)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def broadcast(self, tensor: object) -> None:
        super().broadcast(tensor)
        if len(self.sent) == 2:
            self.release.wait()


async def test_a_broadcast_that_stops_mid_transfer_is_abandoned_and_the_servers_load_from_disk(tmp_path: Path) -> None:
    """The send is abandoned at half the deadline; every server then loads the
    directory from disk, except the stopped one, which is taken out and loaded when
    it answers again.  Later syncs load from disk: the group is broken."""
    import torch
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(2), "b": torch.ones(3)}, str(tmp_path / "model.safetensors"))
    fakes = [FakeVLLM(), FakeVLLM()]
    sender = FakeStuckSender()
    transport = BroadcastTransport(master_port=29600, sender=sender)
    try:
        async with fleet(*fakes) as pool:
            original = pool.servers[1].admin.receive_weights

            async def stop_then(*args: object, **kwargs: object) -> None:
                fakes[1].stop()  # stops mid-transfer: its disk load will not answer either
                await original(*args, **kwargs)  # type: ignore[arg-type]

            pool.servers[1].admin.receive_weights = stop_then  # type: ignore[method-assign]
            sync = WeightSync(pool, transport, timeout_s=2.0)
            with anyio.fail_after(60):
                report = await sync.sync(tmp_path, version=2)
            assert (report.servers, report.timed_out, report.retried) == ([0], [1], [0, 1])
            assert fakes[0].weights == str(tmp_path.resolve()) and fakes[0].version == "2"
            fakes[1].cont()
            await until_up(pool, 1)
            assert fakes[1].version == "2"
            again = await sync.sync(tmp_path, version=3)
            assert (again.transport, again.servers) == ("disk", [0, 1])
    finally:
        sender.release.set()  # the abandoned thread ends
    assert len(sender.sent) == 2


async def test_a_sync_whose_every_server_ran_out_of_time_loads_them_when_they_answer(tmp_path: Path) -> None:
    """Out of time is not failed: the sync returns without a server (turns wait for
    one), and the stopped server is loaded with this version once it answers."""
    fakes = [FakeVLLM()]
    async with fleet(*fakes) as pool:
        original = pool.servers[0].admin.load_weights_from_disk
        stopped = anyio.Event()

        async def stop_then(path: str) -> None:
            if not stopped.is_set():
                stopped.set()
                fakes[0].stop()
            await original(path)

        pool.servers[0].admin.load_weights_from_disk = stop_then  # type: ignore[method-assign]
        with anyio.fail_after(60):
            report = await WeightSync(pool, DiskTransport(), timeout_s=1.0).sync(tmp_path, version=4)
        assert (report.servers, report.timed_out) == ([], [0]) and pool.weight_version == 4
        fakes[0].cont()
        await until_up(pool, 0)
        assert fakes[0].version == "4" and not fakes[0].paused and pool.servers[0].client.weight_version == 4


async def test_a_late_server_is_not_waited_for_and_release_resumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server stopped mid-load misses the deadline: the sync does not wait for its
    resume (it stays paused), and ``release`` (the run's end) resumes it once it
    answers, naming it while it does not."""
    monkeypatch.setattr(weight_sync, "RESUME_S", 0.2)
    fakes = [FakeVLLM(), FakeVLLM()]
    async with fleet(*fakes) as pool:
        original = pool.servers[1].admin.load_weights_from_disk

        async def stop_then(path: str) -> None:
            fakes[1].stop()
            await original(path)

        pool.servers[1].admin.load_weights_from_disk = stop_then  # type: ignore[method-assign]
        sync = WeightSync(pool, DiskTransport(), timeout_s=1.0)
        pool.on_server_back = None  # the run ends before the poller could bring it back
        with anyio.fail_after(60):  # a hang guard
            report = await sync.sync(tmp_path, version=2)
            assert report.timed_out == [1] and fakes[1].paused and not fakes[0].paused
            assert await sync.release() == [1]  # still stopped: named, not waited for past RESUME_S
        assert "servers [1] could not be resumed" in caplog.text
        fakes[1].cont()
        with anyio.fail_after(60):
            assert await sync.release() == []
        assert not fakes[1].paused
