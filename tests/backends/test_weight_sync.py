"""Weight sync against recording vLLM doubles: the choreography, per-phase timings,
and the guarantees when a server fails (never left paused, never on a mixed version)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from backends import (
    BroadcastTransport,
    Completion,
    DiskTransport,
    PendingWeights,
    SamplingParams,
    WeightSync,
    follow_versions,
)  # fmt: skip
from backends._errors import WeightSyncError
from backends._launcher import free_port
from backends._pool import ServerPool
from rstar2_async.testing import FakeByteTokenizer, FakeModelServer, FakeVLLM, serve_http

pytestmark = pytest.mark.anyio

CHOREOGRAPHY = ["/pause", "/collective_rpc", "/reset_prefix_cache", "/update_weight_version", "/resume"]


@asynccontextmanager
async def fleet(*fakes: FakeVLLM) -> AsyncIterator[ServerPool]:
    async with anyio.create_task_group() as tg:
        ports = [await tg.start(serve_http, fake) for fake in fakes]
        async with ServerPool([f"http://127.0.0.1:{p}" for p in ports], model="m", poll_interval_s=0.05) as pool:
            yield pool
        tg.cancel_scope.cancel()


@asynccontextmanager
async def weight_receivers(n: int) -> AsyncIterator[list[int]]:
    """``n`` :mod:`tests.backends._weight_receiver` processes, each ready on its own
    port; yields the ports and kills the processes on exit."""
    script = Path(__file__).with_name("_weight_receiver.py")
    ports = [free_port("127.0.0.1") for _ in range(n)]
    procs = [
        await anyio.open_process([sys.executable, str(script), str(p)], stdout=subprocess.PIPE, stderr=None)
        for p in ports
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            with anyio.fail_after(60):
                assert b"ready" in await proc.stdout.receive()
        yield ports
    finally:
        for proc in procs:
            proc.kill()
            with anyio.CancelScope(shield=True):
                await proc.wait()


async def assert_holds(port: int, weights: Mapping[str, Any], version: str) -> None:
    """The receiver on ``port`` holds exactly ``weights`` (names, dtypes, shapes and
    bytes) and serves ``version``."""
    import torch

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        received = (await http.get("/received")).json()
        assert (await http.get("/weight_info")).json()["weight_version"] == version
    assert set(received) == set(weights)
    for name, t in weights.items():
        assert received[name]["dtype"] == str(t.dtype).removeprefix("torch."), name
        assert received[name]["shape"] == list(t.shape), name
        assert received[name]["sha256"] == hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy()).hexdigest(), name


async def test_disk_sync_runs_the_choreography_on_every_server(tmp_path: Path) -> None:
    fakes = [FakeVLLM(), FakeVLLM()]
    async with fleet(*fakes) as pool:
        report = await WeightSync(pool, DiskTransport()).sync(tmp_path, version=1)
        ids = FakeByteTokenizer().encode_prompt([{"role": "user", "content": "What is 2*3?"}])
        c = await pool.generate(ids, max_tokens=300, sampling=SamplingParams())
    for fake in fakes:
        assert fake.paths() == CHOREOGRAPHY
        assert fake.log[[r.path for r in fake.log].index("/pause")].query == {"mode": "wait"}
        assert fake.weights == str(tmp_path.resolve()) and fake.version == "1" and not fake.paused
    assert report.servers == [0, 1] and report.removed == [] and report.transport == "disk"
    assert min(report.pause_s, report.load_s, report.flush_s, report.version_s, report.resume_s) >= 0
    assert report.total_s >= report.load_s
    assert c.weight_version == 1 and pool.weight_version == 1


async def test_abort_mode_and_in_flight_turn_resumes_after_sync(tmp_path: Path) -> None:
    fakes = [FakeVLLM(FakeModelServer(delay_s=0.3))]
    async with fleet(*fakes) as pool:
        sync = WeightSync(pool, DiskTransport(), pause_mode="abort")
        ids = FakeByteTokenizer().encode_prompt([{"role": "user", "content": "What is 2*3?"}])
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: pool.generate(ids, max_tokens=300, sampling=SamplingParams()))
            await anyio.sleep(0.05)
            report = await sync.sync(tmp_path, version=2)
    assert fakes[0].log[[r.path for r in fakes[0].log].index("/pause")].query == {"mode": "abort"}
    assert report.servers == [0]


async def test_keep_mode_freezes_the_turn_in_flight_and_stamps_the_version_it_was_sent_to(tmp_path: Path) -> None:
    # vLLM's /v1/completions carries no version: the client's own is all there is.
    fakes = [FakeVLLM(FakeModelServer(delay_s=0.3), stamps_versions=False)]
    ids = FakeByteTokenizer().encode_prompt([{"role": "user", "content": "What is 2*3?"}])
    done: list[Completion] = []
    async with fleet(*fakes) as pool:
        sync = WeightSync(pool, DiskTransport(), pause_mode="keep")

        async def turn() -> None:
            done.append(await pool.generate(ids, max_tokens=300, sampling=SamplingParams()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            with anyio.fail_after(30):  # a bound against a hang: the turn reaches the server
                while fakes[0].running == 0:
                    await anyio.sleep(0.01)
            report = await sync.sync(tmp_path, version=1)
        after = await pool.generate(ids, max_tokens=300, sampling=SamplingParams())
        stats = pool.statistics()
    assert fakes[0].log[[r.path for r in fakes[0].log].index("/pause")].query == {"mode": "keep"}
    assert report.servers == [0] and fakes[0].aborted == 0
    # One request, answered whole after the resume, stamped with the version it was sent to.
    assert done[0].finish_reason != "abort" and done[0].weight_version == 0
    assert [r.path for r in fakes[0].log].count("/v1/completions") == 2
    assert after.weight_version == 1
    assert (stats.resumed, stats.interrupted) == (0, 1)


async def test_failing_server_is_retried_then_removed_never_paused_and_loaded_when_back(tmp_path: Path) -> None:
    fakes = [FakeVLLM(), FakeVLLM(fail_paths={"/collective_rpc"})]
    async with fleet(*fakes) as pool:
        sync = WeightSync(pool, DiskTransport(), retries=1)
        fakes[1].dead = False
        report = await sync.sync(tmp_path, version=5)
        assert report.servers == [0] and report.retried == [1] and report.removed == [1]
        assert not fakes[1].paused, "resumed although its load failed"
        assert fakes[1].paths().count("/collective_rpc") == 2  # one retry
        # It keeps failing: the poller's attempts keep it out of rotation.
        with anyio.fail_after(60):  # a bound against a hang, not a timing: the poller's next attempt
            while fakes[1].paths().count("/collective_rpc") < 3:
                await anyio.sleep(0.02)
        assert not pool.is_up(1) and fakes[1].version == "default"
        fakes[1].fail_paths.clear()  # e.g. restarted by the fleet
        with anyio.fail_after(60):
            while not pool.is_up(1):
                await anyio.sleep(0.02)
        assert fakes[1].version == "5" and fakes[1].weights == str(tmp_path.resolve())
        assert pool.servers[1].client.weight_version == 5


async def test_sync_fails_only_when_no_server_takes_the_weights(tmp_path: Path) -> None:
    fakes = [FakeVLLM(fail_paths={"/collective_rpc"})]
    async with fleet(*fakes) as pool:
        with pytest.raises(WeightSyncError, match="no server took"):
            await WeightSync(pool, DiskTransport(), retries=0).sync(tmp_path, version=1)
        assert not fakes[0].paused and pool.weight_version == 0


async def test_cancelled_sync_resumes_paused_servers(tmp_path: Path) -> None:
    fakes = [FakeVLLM(), FakeVLLM()]
    async with fleet(*fakes) as pool:
        original = pool.servers[1].admin.load_weights_from_disk
        loading = anyio.Event()

        async def slow(path: str) -> None:
            loading.set()
            await anyio.sleep(10)
            await original(path)

        async def cancel_while_loading(scope: anyio.CancelScope) -> None:
            await loading.wait()  # not a timer: under load the pause may take longer
            scope.cancel()

        pool.servers[1].admin.load_weights_from_disk = slow  # type: ignore[method-assign]
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_while_loading, scope)
                await WeightSync(pool, DiskTransport()).sync(tmp_path, version=1)
        assert not any(f.paused for f in fakes)
        assert not pool.is_up(0) or fakes[0].version == "default"
        assert not pool.is_up(1)


class FakeRecordingSender:
    """Test double of the rank-0 collective: records instead of broadcasting."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, int, int]] = []
        self.sent: list[tuple[int, ...]] = []

    def open(self, master_address: str, master_port: int, world_size: int) -> None:
        self.opened.append((master_address, master_port, world_size))

    def broadcast(self, tensor: object) -> None:
        self.sent.append(tuple(tensor.shape))  # type: ignore[attr-defined]

    def close(self) -> None:
        pass


async def test_broadcast_ranks_follow_each_servers_worker_count() -> None:
    # Server 0 runs 2 workers (e.g. tensor parallel 2), server 1 runs 4: vLLM joins
    # each worker at rank_offset + its rank, so the offsets are 1 and 3 of 7 ranks.
    import torch

    fakes = [FakeVLLM(), FakeVLLM()]
    sender = FakeRecordingSender()
    async with fleet(*fakes) as pool:
        transport = BroadcastTransport(master_address="10.1.2.3", master_port=29600, ranks_per_server=[2, 4], sender=sender)
        await WeightSync(pool, transport).sync({"w": torch.zeros(2, 3), "b": torch.zeros(5)}, version=3)
    inits = [next(r.body for r in f.log if r.path == "/init_weight_transfer_engine")["init_info"] for f in fakes]
    assert [(i["rank_offset"], i["world_size"]) for i in inits] == [(1, 7), (3, 7)]
    assert sender.opened == [("10.1.2.3", 29600, 7)] and sender.sent == [(2, 3), (5,)]
    assert [f.version for f in fakes] == ["3", "3"]


async def test_broadcast_of_a_directory_sends_its_tensors_and_reloads_a_failed_server_from_it(tmp_path: Path) -> None:
    # What `rstar2 train` does: the export's directory is the weights.  Its tensors
    # go out as stored (bf16 stays bf16); the server whose receive fails is not
    # left behind but reloads that same directory from disk.
    import torch
    from safetensors.torch import save_file

    stored = {"w": torch.zeros(2, 3, dtype=torch.bfloat16), "b": torch.zeros(5)}
    save_file(stored, str(tmp_path / "model.safetensors"))
    fakes = [FakeVLLM(), FakeVLLM(fail_paths={"/update_weights"})]
    sender = FakeRecordingSender()
    async with fleet(*fakes) as pool:
        report = await WeightSync(pool, BroadcastTransport(master_port=29600, sender=sender)).sync(tmp_path, version=4)
    info = next(r.body for r in fakes[0].log if r.path == "/update_weights")["update_info"]
    sent = dict(zip(info["names"], zip(info["dtype_names"], info["shapes"])))
    assert sent == {"w": ("bfloat16", [2, 3]), "b": ("float32", [5])}
    assert sender.sent == [tuple(shape) for _, shape in sent.values()]
    assert report.servers == [0, 1] and report.retried == [1] and report.removed == []
    assert fakes[0].weights == "initial" and fakes[1].weights == str(tmp_path.resolve())
    assert [f.version for f in fakes] == ["4", "4"]


async def test_broadcast_over_gloo_to_receiver_processes(tmp_path: Path) -> None:
    """Two receiver processes speak vLLM's HTTP choreography and join a gloo group;
    the sync broadcasts each tensor from this process (rank 0).  Then a disk sync
    makes them read a safetensors directory into the same parameters."""
    import torch
    from safetensors.torch import save_file

    weights = {
        "model.embed.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "model.norm.weight": torch.tensor([0.5, -1.5], dtype=torch.float32),
        "lm_head.bias": torch.tensor([1, 2, 3], dtype=torch.int64),
    }
    async with weight_receivers(2) as ports:
        async with ServerPool([f"http://127.0.0.1:{p}" for p in ports], model="m", poll_interval_s=0.05) as pool:
            transport = BroadcastTransport(master_port=free_port("127.0.0.1"))
            sync = WeightSync(pool, transport)
            with anyio.fail_after(120):
                report = await sync.sync(weights, version=7)
                weights2 = {k: v * 2 for k, v in weights.items()}
                report2 = await sync.sync(weights2, version=8)  # the group is kept
                for p in ports:
                    await assert_holds(p, weights2, "8")
                weights3 = {k: v * 3 for k, v in weights.items()}
                weights3["model.scale"] = torch.tensor([[0.25, -2.0]], dtype=torch.bfloat16)  # a new parameter
                save_file(weights3, str(tmp_path / "model.safetensors"))
                report3 = await WeightSync(pool, DiskTransport()).sync(tmp_path, version=9)
        assert report.transport == "broadcast" and report.servers == [0, 1] and report2.servers == [0, 1]
        assert report3.transport == "disk" and report3.servers == [0, 1]
        for p in ports:
            await assert_holds(p, weights3, "9")


async def test_broadcast_falls_back_to_disk_for_good_once_a_server_left_the_group(tmp_path: Path) -> None:
    # Server 1 fails its receive and is reloaded from disk: its side of the group may
    # be gone, and a broadcast to a rank that never joins would hang.  So the next
    # sync loads both servers from disk, and so does a sync after a server was out
    # of rotation.
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    fakes = [FakeVLLM(), FakeVLLM(fail_paths={"/update_weights"})]
    sender = FakeRecordingSender()
    transport = BroadcastTransport(master_port=29600, sender=sender)
    async with fleet(*fakes) as pool:
        sync = WeightSync(pool, transport)
        first = await sync.sync(tmp_path, version=1)
        fakes[1].fail_paths.clear()
        for fake in fakes:
            fake.log.clear()
        second = await sync.sync(tmp_path, version=2)
    assert (first.transport, first.retried, sender.sent) == ("broadcast", [1], [(2,)])
    assert (second.transport, second.servers, second.retried) == ("disk", [0, 1], [])
    assert sender.sent == [(2,)]  # nothing broadcast the second time
    for fake in fakes:
        assert "/update_weights" not in fake.paths() and fake.weights == str(tmp_path.resolve())
        assert fake.version == "2"


async def test_broadcast_without_a_directory_fails_clearly_once_a_server_left(tmp_path: Path) -> None:
    import torch

    fakes = [FakeVLLM(), FakeVLLM()]
    transport = BroadcastTransport(master_port=29600, sender=FakeRecordingSender())
    async with fleet(*fakes) as pool:
        sync = WeightSync(pool, transport)
        await sync.sync({"w": torch.zeros(2)}, version=1)
        pool.set_up(1, False)  # out of rotation at the next sync
        with pytest.raises(WeightSyncError, match=r"servers \[1\] left the broadcast group"):
            await sync.sync({"w": torch.ones(2)}, version=2)


class FakeSignallingSender(FakeRecordingSender):
    """Test double: records, and tells a waiting thread once ``count`` tensors went out."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.all_sent = threading.Event()

    def broadcast(self, tensor: object) -> None:
        super().broadcast(tensor)
        if len(self.sent) == self.count:
            self.all_sent.set()


@pytest.mark.parametrize("write_fails", [False, True])
async def test_pending_weights_are_broadcast_before_their_directory_exists(tmp_path: Path, write_fails: bool) -> None:
    # The trainer's path with the broadcast transport: the export is sent from memory
    # while it is being written.  Every tensor goes out before the directory exists
    # (were the broadcast waiting for it, this would time out); server 1's receive
    # fails, and only its reload waits for the directory.  If the write fails, that
    # server is taken out and the others keep the broadcast weights.
    import torch
    from safetensors.torch import save_file

    tensors = {"w": torch.zeros(2, 3), "b": torch.ones(5)}
    directory = tmp_path / "v000001"
    pending = PendingWeights(tensors, directory)
    fakes = [FakeVLLM(), FakeVLLM(fail_paths={"/update_weights"})]
    sender = FakeSignallingSender(count=len(tensors))
    reports = []

    async def sync_and_record(sync: WeightSync) -> None:
        reports.append(await sync.sync(pending, version=1))

    async with fleet(*fakes) as pool:
        sync = WeightSync(pool, BroadcastTransport(master_port=29600, sender=sender))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sync_and_record, sync)
                await anyio.to_thread.run_sync(sender.all_sent.wait)
                assert not directory.exists()
                if write_fails:
                    pending.written(OSError("No space left on device"))
                else:
                    directory.mkdir()
                    save_file(tensors, str(directory / "model.safetensors"))
                    pending.written()
    assert sender.sent == [(2, 3), (5,)]
    assert fakes[0].weights == "initial" and fakes[0].version == "1"  # received by broadcast
    if write_fails:
        assert reports[0].servers == [0] and reports[0].removed == [1]
    else:
        assert reports[0].servers == [0, 1] and reports[0].retried == [1]
        assert fakes[1].weights == str(directory.resolve()) and fakes[1].version == "1"


async def test_a_pool_that_follows_the_sync_is_held_told_the_version_and_takes_a_server_back_only_once_loaded(
    tmp_path: Path,
) -> None:
    # A rollout shard's pool (another process in a run) over the servers of the pool the sync moves.
    fakes = [FakeVLLM(), FakeVLLM()]
    async with fleet(*fakes) as pool, ServerPool([s.url for s in pool.servers], model="m", poll_interval_s=0.05) as shard:
        follow_versions(shard)
        seen: list[tuple[str, list[str]]] = []

        @asynccontextmanager
        async def hold() -> AsyncIterator[None]:
            async with shard.held():
                seen.append(("hold", fakes[0].paths()))
                yield
            seen.append(("release", fakes[0].paths()))

        async def on_version(version: int, servers: list[int]) -> None:
            seen.append((f"version {version} {servers}", fakes[0].paths()))
            shard.set_weight_version(version, servers)

        sync = WeightSync(pool, DiskTransport(), hold=hold, on_version=on_version)
        await sync.sync(tmp_path, version=3)
        assert seen == [("hold", []), ("version 3 [0, 1]", CHOREOGRAPHY[:4]), ("release", CHOREOGRAPHY)]
        ids = FakeByteTokenizer().encode_prompt([{"role": "user", "content": "What is 2*3?"}])
        assert (await shard.generate(ids, max_tokens=300, sampling=SamplingParams())).weight_version == 3

        # Server 1 restarts on its initial weights; the sync's pool reloads it, slowly.
        loading, release = anyio.Event(), anyio.Event()
        original = pool.servers[1].admin.load_weights_from_disk

        async def slow(path: str) -> None:
            loading.set()
            await release.wait()
            await original(path)

        pool.servers[1].admin.load_weights_from_disk = slow  # type: ignore[method-assign]
        fakes[1].dead = True
        with anyio.fail_after(60):  # bounds against a hang, not timings: the pollers' next rounds
            while shard.is_up(1) or pool.is_up(1):
                await anyio.sleep(0.02)
            fakes[1].dead, fakes[1].version = False, "default"
            await loading.wait()
            asked = fakes[1].paths().count("/weight_info")
            while fakes[1].paths().count("/weight_info") < asked + 3:  # the shard's pool asked again and again
                await anyio.sleep(0.02)
            assert not shard.is_up(1), "took back a server on older weights"
            release.set()
            while not shard.is_up(1):
                await anyio.sleep(0.02)
        assert fakes[1].version == "3" and shard.servers[1].client.weight_version == 3
