"""Step 7 (``recipe._publish.Publisher``): with the broadcast transport, ``publish``
returns once the servers hold the weights while the export is still being written;
what needs the directory waits for it; a failed write stops the run."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from backends import BroadcastTransport, DiskTransport, WeightSync
from rstar2_async.recipe import Publisher
from rstar2_async.testing import FakeVLLM, fake_logprobs
from tests.backends.test_weight_sync import FakeRecordingSender, fleet

pytestmark = pytest.mark.anyio


class FakeExport:
    """Test double of ``learn.PendingExport``: its write blocks until released, then
    writes a marker file (or fails)."""

    def __init__(self, tensors: dict[str, Any], fail: bool = False) -> None:
        self.tensors = tensors
        self.release = threading.Event()
        self.fail = fail

    def write(self, out: Path) -> Path:
        self.release.wait(timeout=60)
        if self.fail:
            raise OSError(28, "No space left on device")
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"weights")
        return out


class FakeDriver:
    """Test double of ``learn.LearnerDriver``: hands out prepared exports."""

    def __init__(self, *exports: FakeExport) -> None:
        self.exports = list(exports)
        self.exported: list[Path] = []

    def gather_export(self) -> FakeExport:
        return self.exports.pop(0)

    def export(self, out: Path) -> None:
        out.mkdir(parents=True)
        self.exported.append(out)


class FakeStack:
    """What the publisher reads of a rollout stack."""

    def __init__(self, sync: WeightSync) -> None:
        self.sync, self.fleet = sync, None


async def learn(fn: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(fn, *args)


async def test_broadcast_publish_returns_before_the_export_is_written(tmp_path: Path) -> None:
    import torch

    first, second = FakeExport({"w": torch.zeros(2)}), FakeExport({"w": torch.ones(2)})
    driver = FakeDriver(first, second)
    base = tmp_path / "weights" / "v000000"
    base.mkdir(parents=True)
    async with fleet(FakeVLLM()) as pool:
        sync = WeightSync(pool, BroadcastTransport(master_port=29600, sender=FakeRecordingSender()))
        with anyio.fail_after(60):
            async with Publisher(FakeStack(sync), learn, driver, current=base) as publisher:  # type: ignore[arg-type]
                v1 = tmp_path / "weights" / "v000001"
                report = await publisher.publish(v1, 1)
                # The servers hold version 1; its directory is not written yet, and the
                # one it replaces is kept until it is.
                assert report.servers == [0] and pool.weight_version == 1
                assert not v1.exists() and base.is_dir()
                first.release.set()
                await publisher.written()
                assert v1.is_dir() and not base.exists()
                second.release.set()
                await publisher.publish(tmp_path / "weights" / "v000002", 2)
            # Leaving the context waits for the last write.
            assert (tmp_path / "weights" / "v000002").is_dir() and not v1.exists()


async def test_a_failed_background_write_stops_the_run(tmp_path: Path) -> None:
    import torch

    export = FakeExport({"w": torch.zeros(2)}, fail=True)
    async with fleet(FakeVLLM()) as pool:
        sync = WeightSync(pool, BroadcastTransport(master_port=29600, sender=FakeRecordingSender()))
        with pytest.raises(BaseExceptionGroup) as info, anyio.fail_after(60):
            async with Publisher(FakeStack(sync), learn, FakeDriver(export)) as publisher:  # type: ignore[arg-type]
                await publisher.publish(tmp_path / "v000001", 1)
                export.release.set()
                await anyio.sleep_forever()  # the run goes on until the write's error stops it
    assert info.group_contains(OSError, match="No space left")
    assert not (tmp_path / "v000001").exists()


async def test_disk_publish_writes_then_syncs(tmp_path: Path) -> None:
    driver = FakeDriver()
    out = tmp_path / "v000001"
    async with fleet(FakeVLLM()) as pool:
        publisher = Publisher(FakeStack(WeightSync(pool, DiskTransport())), learn, driver)  # type: ignore[arg-type]
        async with publisher:
            report = await publisher.publish(out, 1)
    assert driver.exported == [out] and report.transport == "disk" and pool.weight_version == 1


async def test_the_export_a_publish_replaces_is_deleted_in_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleting an export (gigabytes) must not hold the event loop the rollout runs on."""
    import shutil

    from rstar2_async.recipe import _publish

    threads: list[threading.Thread] = []
    real = shutil.rmtree

    def rmtree(path: Path, ignore_errors: bool = False) -> None:  # the real one, and where it ran
        threads.append(threading.current_thread())
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(_publish.shutil, "rmtree", rmtree)
    base = tmp_path / "weights" / "v000000"
    base.mkdir(parents=True)
    async with fleet(FakeVLLM()) as pool:
        async with Publisher(FakeStack(WeightSync(pool, DiskTransport())), learn, FakeDriver(), current=base) as publisher:  # type: ignore[arg-type]
            await publisher.publish(tmp_path / "weights" / "v000001", 1)
    assert not base.exists() and (tmp_path / "weights" / "v000001").is_dir()
    assert len(threads) == 1 and threads[0] is not threading.main_thread()


class FakeProbingDriver:
    """Test double of ``learn.LearnerDriver`` for the sync's check: its probe is what a
    ``FakeVLLM`` holding ``weights`` answers."""

    def __init__(self, weights: Path) -> None:
        self.weights = str(weights.resolve())

    def probe_logprobs(self) -> tuple[list[int], list[float]]:
        ids = [4, 8, 15, 16, 23, 42]
        return ids, fake_logprobs(self.weights, ids)


@pytest.mark.parametrize(
    ("knobs", "why"),
    [
        ({"extension": False}, "has no rstar2_reload_weights"),  # an external server started without it
        ({"loads": "/another/model"}, "serves other weights than the learner's"),
    ],
)
async def test_servers_that_cannot_serve_the_learners_weights_are_refused_at_start_up(
    tmp_path: Path, knobs: dict, why: str
) -> None:
    from rstar2_async.errors import TrainError
    from rstar2_async.recipe import SyncCheck, check_servers

    check = SyncCheck(learn, FakeProbingDriver(tmp_path), "fp32", enabled=True)  # type: ignore[arg-type]
    async with fleet(FakeVLLM(**knobs)) as pool:
        stack = FakeStack(WeightSync(pool, DiskTransport(), retries=0))
        with pytest.raises(TrainError, match=f"refusing to train: .*{why}.*Nothing was trained"):
            await check_servers(stack, tmp_path, 0, check)  # type: ignore[arg-type]
    async with fleet(FakeVLLM()) as pool:  # a server that can: loaded in place and verified
        stack = FakeStack(WeightSync(pool, DiskTransport()))
        await check_servers(stack, tmp_path, 0, check)  # type: ignore[arg-type]


async def test_a_server_the_sync_takes_out_is_a_warning_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One server of two fails its load: the other takes the weights, and stderr says
    which server is out and why, as a warning (the run goes on)."""
    from rstar2_async.recipe import SyncCheck, check_servers

    check = SyncCheck(learn, FakeProbingDriver(tmp_path), "fp32", enabled=True)  # type: ignore[arg-type]
    async with fleet(FakeVLLM(), FakeVLLM(fail_paths={"/collective_rpc"})) as pool:
        stack = FakeStack(WeightSync(pool, DiskTransport(), retries=0))
        await check_servers(stack, tmp_path, 0, check)  # type: ignore[arg-type]
        assert pool.is_up(0) and not pool.is_up(1)
    err = capsys.readouterr().err
    assert "rstar2 train: warning: weight sync to version 0: server 1 (http://127.0.0.1:" in err
    assert "(the run goes on)" in err and "error" not in err.split("warning:")[0]
