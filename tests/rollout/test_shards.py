"""ShardedEngine with real worker processes, each a real RolloutEngine and ServerPool
over vLLM doubles (``_shard_factory``)."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from rstar2_async.rollout import GC_GEN0_THRESHOLD, ShardedEngine, ShardError
from rstar2_async.types import Group, Problem, Trajectory
from tests.rollout._shard_factory import spec

pytestmark = pytest.mark.anyio


def problems(k: int, start: int = 0) -> list[Problem]:
    return [
        Problem(id=f"p{i}", problem=f"What is {i + 2}*{i + 3}?", answer=str((i + 2) * (i + 3))) for i in range(start, start + k)
    ]


SLOW = Problem(id="slow", problem="What is 1*1? (slow)", answer="1")


def engine(shards: int, **config: object) -> ShardedEngine:
    return ShardedEngine([spec(i, shards, **config) for i in range(shards)])


def children() -> set[int]:
    """This process's child processes now."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.add(int(entry.name))
    return found


async def until(condition: Callable[[], bool]) -> None:
    """Wait for a condition the workers' reports make true (they come every second)."""
    with anyio.fail_after(60):
        while not condition():
            await anyio.sleep(0.02)


def check_groups(groups: list[Group], ids: list[str], n: int) -> None:
    assert sorted(g.problem.id for g in groups) == sorted(ids)
    for g in groups:
        assert [t.sample_index for t in g.trajectories] == list(range(n))
        assert all(t.problem_id == g.problem.id and t.reward == 1.0 for t in g.trajectories)


@pytest.mark.parametrize("shards", [1, 2])
async def test_every_group_exactly_once_and_no_process_left(shards: int) -> None:
    before = children()
    seen: list[Trajectory] = []
    batch = problems(6)
    async with engine(shards) as sharded:
        pids = sharded.pids()
        assert set(pids) <= children() and len(set(pids)) == shards
        groups = await sharded.run(batch, n=2, on_trajectory=seen.append)
        stats = sharded.statistics()
        pools = sharded.pool_statistics()
    assert [g.problem for g in groups] == batch  # the very objects fed, in order
    check_groups(groups, [p.id for p in batch], 2)
    assert Counter((t.problem_id, t.sample_index) for t in seen) == {(p.id, i): 1 for p in batch for i in range(2)}
    assert stats.trajectories_finished == 12 and stats.groups_finished == 6 and stats.in_flight == 0
    assert len(pools) == shards and sum(p.turns for p in pools) == 24
    if shards == 2:  # fewest outstanding first: each worker got work
        assert all(p.turns > 0 for p in pools)
    assert children() == before
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped, not a zombie


async def test_two_streams_at_once() -> None:
    send, receive = anyio.create_memory_object_stream[Problem]()
    fed = problems(3, start=10)
    async with engine(2) as sharded:
        async with sharded.stream(receive, n=1) as fed_groups, sharded.stream(problems(4), n=2) as listed:
            async with send:
                for problem in fed:
                    await send.send(problem)
            second = [g async for g in listed]
            first = [g async for g in fed_groups]
    check_groups(first, [p.id for p in fed], 1)
    assert [g.problem for g in sorted(first, key=lambda g: g.problem.id)] == fed
    check_groups(second, [f"p{i}" for i in range(4)], 2)


async def test_leaving_the_block_cancels_in_the_workers(tmp_path: Path) -> None:
    stall = tmp_path / "stall"
    stall.touch()
    async with engine(1, stall_file=str(stall)) as sharded:
        async with sharded.stream([SLOW, *problems(2)], n=2) as groups:
            got = [await groups.receive(), await groups.receive()]
        # "slow"'s sample 1 never answers: leaving cancelled it, or it would still be in flight
        again = await sharded.run(problems(1, start=5), n=1)
        stats = sharded.statistics()
    check_groups(got, ["p0", "p1"], 2)
    check_groups(again, ["p5"], 1)
    assert stats.in_flight == 0  # reported with p5's group, after the Cancel
    assert stats.trajectories_finished == 2 * 2 + 1 + 1  # p0, p1, slow's sample 0, p5


async def test_held_stops_admission_in_every_worker_until_released() -> None:
    async with engine(2) as sharded:
        async with sharded.stream(problems(2), n=1) as groups:
            async with sharded.held():  # entered: every worker acknowledged
                await until(lambda: [p.waiting for p in sharded.pool_statistics()] == [1, 1])
                assert [p.turns for p in sharded.pool_statistics()] == [0, 0]
                assert groups.statistics().current_buffer_used == 0
            got = [g async for g in groups]  # released: both complete
    check_groups(got, ["p0", "p1"], 1)


async def test_a_killed_worker_is_restarted_and_its_problems_run_again(tmp_path: Path) -> None:
    stall = tmp_path / "stall"
    stall.touch()
    seen: list[Trajectory] = []
    slow_started = anyio.Event()

    def record(t: Trajectory) -> None:
        seen.append(t)
        if t.problem_id == "slow":
            slow_started.set()

    async with engine(2, stall_file=str(stall)) as sharded:
        old = sharded.pids()
        async with sharded.stream([SLOW, *problems(4)], n=2, on_trajectory=record) as stream:
            groups = [await stream.receive() for _ in range(4)]
            await slow_started.wait()  # worker 0 holds "slow", its sample 0 back, sample 1 stalled
            os.kill(old[0], signal.SIGKILL)
            stall.unlink()
            with anyio.fail_after(120):  # "slow" runs again in the new worker, or never comes
                groups += [g async for g in stream]
        new = sharded.pids()
        assert sharded.restarts() == [1, 0]
    check_groups(groups, ["slow", "p0", "p1", "p2", "p3"], 2)
    assert Counter((t.problem_id, t.sample_index) for t in seen) == {(g.problem.id, i): 1 for g in groups for i in range(2)}
    assert new[0] != old[0] and new[1] == old[1]


async def test_a_hung_worker_is_killed_restarted_and_its_problems_run_again(tmp_path: Path) -> None:
    """A worker that stops answering without dying (here SIGSTOP: a deadlock or a
    frozen node looks the same from the parent) is treated as dead."""
    stall = tmp_path / "stall"
    stall.touch()
    slow_started = anyio.Event()

    def record(t: Trajectory) -> None:
        if t.problem_id == "slow":
            slow_started.set()

    sharded = ShardedEngine([spec(i, 2, stall_file=str(stall)) for i in range(2)], hang_timeout_s=3.0)
    async with sharded:
        old = sharded.pids()
        async with sharded.stream([SLOW, *problems(2)], n=2, on_trajectory=record) as stream:
            groups = [await stream.receive() for _ in range(2)]
            await slow_started.wait()  # worker 0 holds "slow", its sample 1 stalled
            os.kill(old[0], signal.SIGSTOP)
            stall.unlink()
            with anyio.fail_after(120):
                groups += [g async for g in stream]
        assert sharded.restarts() == [1, 0] and sharded.pids()[0] != old[0]
    check_groups(groups, ["slow", "p0", "p1"], 2)


async def test_finished_samples_are_not_run_again() -> None:
    batch = problems(2)
    async with engine(1) as sharded:
        kept = (await sharded.run(batch[:1], n=2))[0].trajectories[1]
    async with engine(2) as sharded:
        groups = await sharded.run(batch, n=2, finished={("p0", 1): kept})
        stats = sharded.statistics()
    assert groups[0].trajectories[1] == kept
    check_groups(groups, ["p0", "p1"], 2)
    assert stats.trajectories_started == 3


async def test_a_factory_that_raises_is_a_shard_error_naming_the_worker() -> None:
    before = children()
    specs = [spec(0, 2), spec(1, 2, fail="no servers for you")]
    with pytest.raises(ShardError) as caught:
        async with ShardedEngine(specs):
            pass
    assert "shard worker 1" in str(caught.value) and caught.value.shard == 1
    assert caught.value.exit_code not in (0, None)
    assert "failing on purpose" in caught.value.stderr_tail and "no servers for you" in caught.value.stderr_tail
    assert children() == before


async def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="shard=1"):
        ShardedEngine([spec(0, 2), spec(0, 2)])
    async with engine(1) as sharded:
        with pytest.raises(ValueError, match="max_turns"):
            async with sharded.stream(problems(1), n=1, max_turns=0):
                pass
        check_groups(await sharded.run(problems(1), n=1), ["p0"], 1)


async def test_one_problem_twice_in_a_stream_is_two_groups() -> None:
    """Streaming training can hold a problem at two stream positions at once (an
    epoch's end); each is its own group, and its trajectories keep the problem's id."""
    twice = [*problems(2), *problems(1)]
    async with engine(2) as sharded:
        groups = await sharded.run(twice, n=2)
    assert [id(g.problem) for g in groups] == [id(p) for p in twice]  # one group per object fed
    check_groups(groups, ["p0", "p1", "p0"], 2)


async def test_weight_versions_reach_the_workers_serving_those_servers() -> None:
    async with engine(2) as sharded:  # a fleet of 2: worker 0 serves server 0, worker 1 server 1
        sharded.set_weight_version(7, [1])
        partly = await sharded.run(problems(2), n=1)  # one problem each: the fewest outstanding first
        versions = [p.weight_version for p in sharded.pool_statistics()]
        sharded.set_weight_version(8)
        everywhere = await sharded.run(problems(2), n=1)
    assert sorted(g.trajectories[0].weight_version for g in partly) == [0, 7]
    assert versions == [7, 7]  # the pool's stamp, as one pool's set_weight_version(7, [1]) sets it
    assert [g.trajectories[0].weight_version for g in everywhere] == [8, 8]


async def test_applied_returns_once_every_worker_acted_on_the_versions() -> None:
    """The weight sync awaits it before the servers resume: the workers' pools must
    have the version by then (their reports come only every second otherwise)."""
    async with engine(2) as sharded:
        sharded.set_weight_version(7, [1])
        await sharded.applied()
        assert [p.weight_version for p in sharded.pool_statistics()] == [7, 7]
        sharded.set_weight_version(9)
        sharded.take_out([0])
        await sharded.applied()
        stats = sharded.pool_statistics()
    assert [p.weight_version for p in stats] == [9, 9]
    assert [s.up for p in stats for s in p.dispatch.servers] == [False, True]


async def test_servers_taken_out_stay_out_until_they_report_the_version() -> None:
    """A server a sync could not load leaves its worker's rotation and stays out while
    it reports another version than the one the worker was told."""
    async with engine(1, follow=True) as sharded:  # one worker over both servers
        sharded.set_weight_version(5)  # the doubles report "default": none would be taken back
        sharded.take_out([0])

        def up() -> list[bool]:  # as the worker last reported (every second, and with every group)
            return [s.up for p in sharded.pool_statistics() for s in p.dispatch.servers]

        await until(lambda: up() == [False, True])
        check_groups(await sharded.run(problems(4), n=2), ["p0", "p1", "p2", "p3"], 2)  # on server 1 alone
        assert up() == [False, True]  # polled all along, and refused


async def test_a_worker_runs_the_tuned_collector_and_collects_what_it_froze_at_each_version(tmp_path: Path) -> None:
    """The trainer's process tunes its collector and collects the frozen cycles once a
    step; a worker, which runs the rollouts themselves, does the same: tuned before its
    factory runs, collecting at each new weight version (once a sync)."""
    probe = tmp_path / "worker0"
    async with engine(1, gc_probe=str(probe)) as sharded:  # entered once the factory ran
        settings = json.loads(probe.with_suffix(".json").read_text())
        frozen_kept = not probe.with_suffix(".collected").exists()
        sharded.set_weight_version(1)
        await sharded.applied()
        collected = probe.with_suffix(".collected").exists()
    assert settings["threshold"] == [GC_GEN0_THRESHOLD, 20, 100] and "_freeze_survivors" in settings["callbacks"]
    assert frozen_kept and collected
