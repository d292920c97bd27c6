"""Infrastructure failures in a rollout: the real jailed pool and the real service
client, with the faults themselves (a full queue, a service that is gone); the model is
the scripted server over HTTP.

Checked: a tool call the sandbox failed stops the trajectory, marked
(``infra_failure``), and the model never reads it; the sample is rolled again in its
slot (``rollout.infra_rerolls``) and graded only once it runs clean."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from backends import RetryPolicy, TokenClient
from rstar2_async.config import RolloutConfig
from rstar2_async.rollout import RolloutEngine
from rstar2_async.testing import FakeByteTokenizer, FakeExactReward, FakeModelServer, arithmetic_policy, serve_http
from rstar2_async.types import Problem
from sandbox import Sandbox, SandboxClient, SandboxPool
from tests.sandbox._helpers import config, dead_address, wait_until

pytestmark = pytest.mark.anyio

PROBLEM = Problem(id="p0", problem="What is 6*7?", answer="42")
TOOL = "tool execute_python_code_with_standard_io"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a pool per test; the engine's own tests cover trio


@asynccontextmanager
async def engine_over(server: FakeModelServer, sandbox: Sandbox, rerolls: int) -> AsyncIterator[RolloutEngine]:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, server)
        retry = RetryPolicy(max_retries=1, initial_s=0.001, max_s=0.01)
        async with TokenClient(f"http://127.0.0.1:{port}/v1", model="m", retry=retry) as client:
            yield RolloutEngine(
                backend=client, sandbox=sandbox, config=RolloutConfig(infra_rerolls=rerolls),
                tokenizer=FakeByteTokenizer(), reward=FakeExactReward(),
            )  # fmt: skip
        tg.cancel_scope.cancel()


def seen_by_the_model(server: FakeModelServer) -> str:
    tok = FakeByteTokenizer()
    return "".join(tok.decode(r["prompt"]) for r in server.requests)


async def test_no_sandbox_service_answering_stops_every_try_unseen_and_ungraded() -> None:
    server = FakeModelServer()
    async with SandboxClient([dead_address()], retries=1, cooldown_s=0.0) as client:
        async with engine_over(server, client, rerolls=2) as engine:
            [group] = await engine.run([PROBLEM], n=2)
    for t in group.trajectories:
        assert t.finish_reason == "error" and t.reward is None
        assert t.infra_failure.startswith(f"{TOOL}: [sandbox] sandbox service unreachable: http://127.0.0.1:")
        assert len(t.infra_retries) == 2 and all(r.startswith(TOOL) for r in t.infra_retries)
        [turn] = t.turns  # the turn that called the tool is kept, its answer never appended
        assert turn.num_appended == 0 and turn.tool_results[0].status == "internal"
        assert len(t.response_ids) == turn.num_generated and t.infra_attempts == (3, 3)
    assert len(server.requests) == 2 * 3  # one turn per try: nothing came after a failed call
    assert "<tool_response>\n" not in seen_by_the_model(server) and "[sandbox]" not in seen_by_the_model(server)
    assert engine.statistics().infra_failed == 6


async def test_a_full_queue_fails_the_try_and_the_sample_rolled_again_is_graded() -> None:
    """One worker, one queue place, both taken: the trajectory's call finds the queue
    full.  The model's next request (the re-roll's first turn) releases them, so the
    re-roll's call waits its turn (the running blocker's 3 s: a worker cannot be told
    to stop a call early) and runs."""
    async with SandboxPool(config(workers=1, max_queue=1)) as pool, anyio.create_task_group() as tg:
        release = anyio.Event()

        async def block(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            async with anyio.create_task_group() as blockers:
                blockers.start_soon(pool.run, "while True: pass", "", 3.0)
                await wait_until(lambda: pool.statistics().workers_busy == 1)
                blockers.start_soon(pool.run, "while True: pass", "", 3.0)
                await wait_until(lambda: pool.statistics().queue_depth == 1)
                task_status.started()
                await release.wait()
                blockers.cancel_scope.cancel()

        await tg.start(block)

        def policy(conversation: str) -> str:
            if len(server.requests) == 2:  # the re-roll begins: the blockers go
                release.set()
            return arithmetic_policy(conversation)

        server = FakeModelServer(policy=policy)
        async with engine_over(server, pool, rerolls=1) as engine:
            [group] = await engine.run([PROBLEM], n=1)
    [t] = group.trajectories
    assert t.finish_reason == "answer" and t.reward == 1.0 and not t.infra_failed
    assert t.infra_retries == [f"{TOOL}: [sandbox] sandbox queue full (1 calls waiting)"]
    assert t.infra_attempts == (1, 2)
    assert "queue full" not in seen_by_the_model(server)
    assert pool.statistics().by_status.get("internal") == 1

