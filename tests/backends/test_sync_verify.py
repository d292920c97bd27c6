"""A weight sync verified before the pool samples from it, against recording vLLM
doubles whose prompt log-probs depend on the weights they hold
(``rstar2_async.testing.fake_logprobs``): a server that loads other weights than the
learner's is reloaded once, then taken out and named; none left stops the sync;
vLLM's own word on the reload (the worker extension's report) is read."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from backends import DiskTransport, Probe, WeightSync, WeightSyncError
from rstar2_async.testing import FakeVLLM, fake_logprobs
from tests.backends.test_weight_sync import fleet

pytestmark = pytest.mark.anyio

IDS = [5, 17, 3, 99, 42, 7, 250, 1]


def probe_of(directory: Path) -> Probe:
    """The learner's probe when it exported ``directory``."""
    return Probe(token_ids=IDS, logprobs=fake_logprobs(str(directory.resolve()), IDS), tolerance=1e-6)


async def polls(fake: FakeVLLM, count: int) -> None:
    """Until the pool's poller has asked ``fake`` ``count`` more times."""
    seen = [r.path for r in fake.log].count("/metrics")
    with anyio.fail_after(60):  # a bound against a hang, not a timing
        while [r.path for r in fake.log].count("/metrics") < seen + count:
            await anyio.sleep(0.02)


async def test_a_verified_sync_scores_the_probe_on_every_server_before_turns_are_admitted(tmp_path: Path) -> None:
    fakes = [FakeVLLM(), FakeVLLM()]
    async with fleet(*fakes) as pool:
        report = await WeightSync(pool, DiskTransport()).sync(tmp_path, 1, probe_of(tmp_path))
    assert report.servers == [0, 1] and report.removed == [] and report.errors == []
    assert report.probe_diff_max == 0.0 and report.verify_s >= 0
    for fake in fakes:  # the probe is scored after the resume (a paused vLLM schedules nothing)
        assert [r.path for r in fake.log if r.path != "/metrics"][-2:] == ["/resume", "/v1/completions"]


async def test_a_server_given_the_wrong_directory_is_reloaded_once_then_taken_out_and_named(tmp_path: Path) -> None:
    fakes = [FakeVLLM(), FakeVLLM(loads="/elsewhere")]
    async with fleet(*fakes) as pool:
        sync = WeightSync(pool, DiskTransport())
        report = await sync.sync(tmp_path, 3, probe_of(tmp_path))
        assert report.servers == [0] and report.removed == [1] and report.retried == [1]
        assert fakes[1].paths().count("/collective_rpc") == 2  # the sync's load and one reload
        [error] = report.errors
        assert f"server 1 ({pool.servers[1].url}) serves other weights" in error and "after a reload" in error
        assert not pool.is_up(1) and not fakes[1].paused
        await polls(fakes[1], 3)  # it answers, and holds version 3: still kept out
        assert not pool.is_up(1)
        fakes[1].loads, fakes[1].version = None, "default"  # restarted (by the fleet): loaded and verified
        with anyio.fail_after(60):
            while not pool.is_up(1):
                await anyio.sleep(0.02)
        assert fakes[1].weights == str(tmp_path.resolve()) and fakes[1].version == "3"


async def test_no_server_passing_the_probe_stops_the_sync_with_each_ones_reason(tmp_path: Path) -> None:
    fakes = [FakeVLLM(loads="/stale"), FakeVLLM(loads="/stale")]
    async with fleet(*fakes) as pool:
        with pytest.raises(WeightSyncError) as caught:
            await WeightSync(pool, DiskTransport()).sync(tmp_path, 1, probe_of(tmp_path))
        message = str(caught.value)
        assert all(f"({s.url}) serves other weights" in message for s in pool.servers)
        assert not any(pool.is_up(i) for i in range(2)) and not any(f.paused for f in fakes)


async def test_an_unverified_sync_does_not_notice(tmp_path: Path) -> None:
    """What the probe is for: without it the wrong directory goes unseen."""
    fakes = [FakeVLLM(loads="/elsewhere")]
    async with fleet(*fakes) as pool:
        report = await WeightSync(pool, DiskTransport()).sync(tmp_path, 1)
    assert report.servers == [0] and report.errors == [] and fakes[0].weights == "/elsewhere"


@pytest.mark.parametrize(
    ("knobs", "named"),
    [
        ({"unloaded": ["lm_head.weight"]}, "lm_head.weight: kept its old value"),
        ({"extension": False}, "--worker-extension-cls rstar2_vllm_ext.ReloadExtension"),
    ],
)
async def test_a_reload_vllm_reports_incomplete_fails_naming_the_parameter_or_the_fix(
    tmp_path: Path, knobs: dict, named: str
) -> None:
    async with fleet(FakeVLLM(**knobs)) as pool:
        with pytest.raises(WeightSyncError, match="no server took") as caught:
            await WeightSync(pool, DiskTransport(), retries=0).sync(tmp_path, 1)
    assert named in str(caught.value) and pool.servers[0].url in str(caught.value)
