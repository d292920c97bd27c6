"""The server pool over real HTTP against recording vLLM doubles (asyncio and trio)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import anyio
import pytest

from backends import SamplingParams, ServerUnavailable
from backends._pool import ServerPool
from rstar2_async.config import RolloutConfig
from rstar2_async.rollout import RolloutEngine
from rstar2_async.testing import FakeByteTokenizer, FakeModelServer, FakeSandbox, FakeVLLM, serve_http
from rstar2_async.types import Problem

pytestmark = pytest.mark.anyio
GREEDY = SamplingParams(temperature=0.0)


@asynccontextmanager
async def fleet(*fakes: FakeVLLM, **pool_kwargs: object) -> AsyncIterator[ServerPool]:
    async with anyio.create_task_group() as tg:
        ports = [await tg.start(serve_http, fake) for fake in fakes]
        kwargs = {"poll_interval_s": 0.05, **pool_kwargs}
        async with ServerPool([f"http://127.0.0.1:{p}" for p in ports], model="m", **kwargs) as pool:  # type: ignore[arg-type]
            yield pool
        tg.cancel_scope.cancel()


def prompt(text: str) -> list[int]:
    return FakeByteTokenizer().encode_prompt([{"role": "user", "content": text}])


@dataclass
class FakeGatedModelServer(FakeModelServer):
    """Test double: a model server whose completions wait for ``gate``; ``arrived``
    is set once a completion has come in."""

    gate: anyio.Event = field(default_factory=anyio.Event)
    arrived: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if path == "/v1/completions":
            self.arrived.set()
            await self.gate.wait()
        return await super().__call__(method, path, body)


async def until_waiting(pool: ServerPool, n: int) -> None:
    """Until ``n`` turns wait in ``pool``'s queue, all else being blocked."""
    with anyio.fail_after(60):  # a hang guard, not a timing
        while pool.statistics().waiting != n:
            await anyio.wait_all_tasks_blocked()
    assert pool.statistics().waiting == n


async def test_capacity_comes_from_metrics_and_turns_spread_by_free_budget() -> None:
    fakes = [FakeVLLM(FakeModelServer(delay_s=0.2), capacity_tokens=4096) for _ in range(2)]
    fakes[0].used_tokens = 3000  # someone else's load
    async with fleet(*fakes) as pool:
        stats = pool.statistics().dispatch
        assert [s.capacity_tokens for s in stats.servers] == [4096, 4096]
        assert stats.servers[0].observed_tokens == 3000
        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(partial(pool.generate, prompt(f"What is {i}*3?"), max_tokens=200, sampling=GREEDY))
        served = [sum(r.path == "/v1/completions" for r in f.log) for f in fakes]
    assert served == [0, 4], "the loaded server gets nothing while the other has room"


async def test_later_turns_go_back_to_their_server() -> None:
    fakes = [FakeVLLM() for _ in range(3)]
    async with fleet(*fakes) as pool:
        for turn in range(3):
            for s in range(6):
                await pool.generate(prompt(f"What is {s}*{turn}?"), max_tokens=100, sampling=GREEDY, session=("p", s))
        stats = pool.statistics().dispatch
    assert stats.affinity_hits == 12 and stats.affinity_moves == 0


async def test_no_room_waits_for_a_release_instead_of_overflowing() -> None:
    fake = FakeVLLM(FakeModelServer(delay_s=0.1), capacity_tokens=400)
    async with fleet(fake) as pool:
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(partial(pool.generate, prompt(f"What is {i}*2?"), max_tokens=300, sampling=GREEDY))
            await anyio.sleep(0.05)
            assert pool.statistics().dispatch.in_flight == 1  # each reserves > half the cache
        assert pool.statistics().dispatch.blocked >= 2
        assert pool.statistics().turns == 3


async def test_waiting_turns_go_largest_remaining_budget_first() -> None:
    model = FakeGatedModelServer()
    fake = FakeVLLM(model, capacity_tokens=400)
    order: list[str] = []

    async def turn(name: str, max_tokens: int) -> None:
        session = None if name == "running" else name  # no hold left behind: its room goes to the waiters
        await pool.generate(prompt(f"What is {len(name)}*2?"), max_tokens=max_tokens, sampling=GREEDY, session=session)
        order.append(name)

    async with fleet(fake) as pool, anyio.create_task_group() as tg:
        tg.start_soon(turn, "running", 300)  # leaves no room for another turn
        await model.arrived.wait()
        tg.start_soon(turn, "little", 100)  # the end of a trajectory: waits first
        await until_waiting(pool, 1)
        tg.start_soon(turn, "much", 300)  # more budget left: goes first
        await until_waiting(pool, 2)
        assert pool.statistics().dispatch.in_flight == 1
        model.gate.set()
    assert order == ["running", "much", "little"]


@pytest.mark.parametrize(("order", "expected"), [("budget", ["new", "old"]), ("session", ["old", "new"])])
async def test_session_order_lets_the_oldest_trajectory_go_first(order: str, expected: list[str]) -> None:
    """A streaming trainer waits for its oldest group: with ``order="session"`` a new
    trajectory's first turn (the larger remaining budget) does not overtake the later
    turn of an older one."""
    model = FakeGatedModelServer()
    fake = FakeVLLM(model, capacity_tokens=400)
    done: list[str] = []

    async def turn(name: str, max_tokens: int) -> None:
        session = None if name == "running" else name
        await pool.generate(prompt(f"What is {len(name)}*2?"), max_tokens=max_tokens, sampling=GREEDY, session=session)
        done.append(name)

    async with fleet(fake, order=order, hold_reports=0) as pool:
        model.gate.set()
        await turn("old", 100)  # the old trajectory's first turn
        model.gate, model.arrived = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn, "running", 300)  # leaves no room for another turn
            await model.arrived.wait()
            tg.start_soon(turn, "new", 300)  # a new trajectory's first turn waits
            await until_waiting(pool, 1)
            tg.start_soon(turn, "old", 100)  # then the old one's next turn
            await until_waiting(pool, 2)
            assert pool.statistics().dispatch.in_flight == 1
            model.gate.set()
    assert done == ["old", "running", *expected]


async def test_a_cancelled_waiting_turn_leaves_no_trace() -> None:
    fake = FakeVLLM(FakeModelServer(delay_s=0.1), capacity_tokens=400)
    async with fleet(fake) as pool:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(pool.generate, prompt("What is 1*2?"), max_tokens=300, sampling=GREEDY))
            await anyio.sleep(0.02)
            with anyio.move_on_after(0.02):  # cancelled while it waits for room
                await pool.generate(prompt("What is 2*2?"), max_tokens=300, sampling=GREEDY)
        await pool.generate(prompt("What is 3*2?"), max_tokens=300, sampling=GREEDY)
        stats = pool.statistics()
    assert stats.turns == 2 and stats.dispatch.in_flight == 0 and stats.dispatch.dispatched == 2


async def test_dead_server_turn_is_resubmitted_elsewhere_and_server_comes_back() -> None:
    fakes = [FakeVLLM(FakeModelServer(delay_s=0.1)) for _ in range(2)]
    async with fleet(*fakes) as pool:
        ids = prompt("What is 6*7?")
        first = await pool.generate(ids, max_tokens=100, sampling=GREEDY, session="s")
        home = next(i for i, f in enumerate(fakes) if any(r.path == "/v1/completions" for r in f.log))
        async with anyio.create_task_group() as tg:

            async def turn() -> None:
                nonlocal second
                second = await pool.generate(ids, max_tokens=100, sampling=GREEDY, session="s")

            second = None
            tg.start_soon(turn)
            await anyio.sleep(0.05)
            fakes[home].dead = True  # dies mid-generation
        assert second is not None and second.token_ids == first.token_ids
        stats = pool.statistics()
        assert stats.failovers >= 1 and not pool.is_up(home)
        fakes[home].dead = False  # "restarted"
        with anyio.fail_after(5):
            while not pool.is_up(home):
                await anyio.sleep(0.02)
        assert pool.statistics().servers_back == 1


async def test_hung_server_times_out_and_the_turn_moves() -> None:
    fakes = [FakeVLLM(hang=True), FakeVLLM()]
    async with fleet(*fakes, request_timeout_s=0.3, policy="round_robin") as pool:
        with anyio.fail_after(5):
            c = await pool.generate(prompt("What is 2*2?"), max_tokens=300, sampling=GREEDY, session="a")
    assert c.finish_reason == "stop" and pool.statistics().failovers == 1


async def test_all_servers_down_raises_after_the_budget() -> None:
    fakes = [FakeVLLM(dead=True)]
    async with fleet(*fakes, unavailable_timeout_s=0.3) as pool:
        assert pool.statistics().servers_up == 0
        with pytest.raises(ServerUnavailable, match="no server up"):
            await pool.generate(prompt("What is 1*1?"), max_tokens=10, sampling=GREEDY)


async def test_a_full_server_that_is_up_is_waited_for_past_the_no_server_budget() -> None:
    # The budget is for "no server up" only: once one is back, a turn that waits
    # for room there waits as long as it takes, however long the outage was.
    fake = FakeVLLM(FakeModelServer(), capacity_tokens=400, dead=True)
    async with fleet(fake, unavailable_timeout_s=1.0) as pool, anyio.create_task_group() as tg:
        done = anyio.Event()

        async def turn() -> None:
            await pool.generate(prompt("What is 1*1?"), max_tokens=300, sampling=GREEDY)
            done.set()

        tg.start_soon(turn)
        await anyio.sleep(0.2)
        fake.dead, fake.used_tokens = False, 400  # back, but someone else's load fills it
        await anyio.sleep(1.3)  # past the 1 s budget counted from the outage
        assert not done.is_set() and pool.statistics().servers_up == 1
        fake.used_tokens = 0
        with anyio.fail_after(5):
            await done.wait()


async def test_weight_version_is_stamped_and_held_blocks_new_turns() -> None:
    async with fleet(FakeVLLM()) as pool:
        pool.set_weight_version(3)
        c = await pool.generate(prompt("What is 3*3?"), max_tokens=100, sampling=GREEDY)
        assert c.weight_version == 3
        done = anyio.Event()

        async def turn() -> None:
            await pool.generate(prompt("What is 4*4?"), max_tokens=100, sampling=GREEDY)
            done.set()

        async with anyio.create_task_group() as tg:
            async with pool.held():
                tg.start_soon(turn)
                await anyio.sleep(0.2)
                assert not done.is_set()
        assert done.is_set()


async def test_rollout_engine_runs_unchanged_over_the_pool_through_a_server_death() -> None:
    fakes = [FakeVLLM(FakeModelServer(delay_s=0.02)) for _ in range(3)]
    problems = [Problem(id=f"p{i}", problem=f"What is {i}*{i + 1}?", answer=str(i * (i + 1))) for i in range(8)]
    async with fleet(*fakes) as pool:
        engine = RolloutEngine(
            backend=pool, sandbox=FakeSandbox(), config=RolloutConfig(max_in_flight=16), tokenizer=FakeByteTokenizer()
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(_kill_later, fakes[1])
            groups = await engine.run(problems, n=4)
            tg.cancel_scope.cancel()
    trajectories = [t for g in groups for t in g.trajectories]
    assert len(trajectories) == 32
    assert all(t.finish_reason == "answer" for t in trajectories), {t.finish_reason for t in trajectories}
    assert sorted((t.problem_id, t.sample_index) for t in trajectories) == sorted(
        (p.id, i) for p in problems for i in range(4)
    )


async def test_a_trajectorys_end_frees_its_held_context_at_once() -> None:
    fakes = [FakeVLLM(FakeModelServer(delay_s=0.02)) for _ in range(2)]
    problems = [Problem(id=f"p{i}", problem=f"What is {i}*{i + 1}?", answer=str(i * (i + 1))) for i in range(4)]
    async with fleet(*fakes, poll_interval_s=3600) as pool:  # no report ends a hold here
        await pool.generate(prompt("What is 2*2?"), max_tokens=100, sampling=GREEDY, session="s")
        assert sum(s.held_tokens for s in pool.statistics().dispatch.servers) > 0
        pool.end_session("s")
        assert sum(s.held_tokens for s in pool.statistics().dispatch.servers) == 0
        engine = RolloutEngine(
            backend=pool, sandbox=FakeSandbox(), config=RolloutConfig(max_in_flight=8), tokenizer=FakeByteTokenizer()
        )
        groups = await engine.run(problems, n=2)  # the agent loop ends each session
        stats = pool.statistics().dispatch
    assert all(t.finish_reason == "answer" and len(t.turns) > 1 for g in groups for t in g.trajectories)
    assert stats.affinity_hits > 0 and sum(s.held_tokens for s in stats.servers) == 0


async def _kill_later(fake: FakeVLLM) -> None:
    await anyio.sleep(0.1)
    fake.dead = True
