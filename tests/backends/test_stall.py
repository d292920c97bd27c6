"""Progress, not duration, decides that a server hangs: the pool's stall watch
(pure, on literal times), and turns that fail over from a server that stalls
mid-stream, keeping what it streamed (over real HTTP; the stalling server is a
double of the fault, the one it fails over to the scripted vLLM double)."""

from __future__ import annotations

import anyio
import pytest

from backends import RetryPolicy, SamplingParams, ServerPool
from backends._progress import Progress, StallWatch
from rstar2_async.testing import FakeByteTokenizer, FakeModelServer, FakeRawServer, FakeVLLM, serve_http, stalling_stream

pytestmark = pytest.mark.anyio
GREEDY = SamplingParams(temperature=0.0)


async def test_progress_not_duration_decides_a_stall() -> None:
    """A request whose tokens grow is never cancelled, however long it runs; one
    without a new token for ``stall_s`` is.  (Checks driven by hand with literal
    times; no awaits inside a cancelled scope.)"""
    watch = StallWatch(stall_s=10.0, limit_s=None)
    steady, silent = Progress(), Progress()
    with watch.watch(steady) as w_steady, watch.watch(silent) as w_silent:
        start = anyio.current_time()
        for t in range(1, 100):  # 99 s: a token every 3 s
            if t % 3 == 0:
                steady.add([t], [0.0])
            watch.check(start + t)
        assert not w_steady.scope.cancel_called
        assert w_silent.scope.cancel_called and w_silent.stalled


async def test_a_pause_does_not_count_and_the_outer_bound_counts_whatever_the_progress() -> None:
    watch = StallWatch(stall_s=10.0, limit_s=None)
    with watch.watch(Progress()) as watched:
        now = anyio.current_time()
        with watch.paused():  # a weight sync holds the servers
            watch.check(now + 100)
            assert not watched.scope.cancel_called
        watch.check(now + 5)  # stall_s again from the pause's end
        assert not watched.scope.cancel_called
        watch.check(now + 11)
        assert watched.scope.cancel_called and watched.stalled
    bounded = StallWatch(stall_s=None, limit_s=20.0)
    progress = Progress()
    with bounded.watch(progress) as watched:
        now = anyio.current_time()
        for t in range(1, 25):
            progress.add([t], [0.0])
            bounded.check(now + t)
        assert watched.scope.cancel_called and not watched.stalled


def stalling_vllm(model: FakeModelServer, events: int) -> FakeRawServer:
    """A vLLM double that streams the scripted model's first ``events`` chunks of
    each completion, then stalls (until its client goes)."""

    async def first_events(body: bytes) -> list[bytes]:
        _, sse = await model("POST", "/v1/completions", body)
        return [e + b"\n\n" for e in sse.split(b"\n\n")[:events]]

    return stalling_stream(first_events)


async def through(stalling: FakeRawServer, healthy: FakeVLLM, prompt: list[int], **pool: object) -> tuple:
    """One turn through a pool of ``stalling`` then ``healthy`` (round robin: the turn
    starts on ``stalling``); the turn, the pool's statistics, whether ``stalling`` is
    still in rotation, and the turn generated whole by ``healthy`` alone."""
    async with anyio.create_task_group() as tg:
        await tg.start(stalling.serve)
        port = await tg.start(serve_http, healthy)
        urls = [f"http://127.0.0.1:{stalling.port}", f"http://127.0.0.1:{port}"]
        async with ServerPool(urls, model="m", policy="round_robin", poll_interval_s=3600, retry=RetryPolicy(max_retries=0), **pool) as p:  # type: ignore[arg-type]
            with anyio.fail_after(30):
                turn = await p.generate(prompt, max_tokens=200, sampling=GREEDY)
            stats, up = p.statistics(), p.is_up(0)
        async with ServerPool([f"http://127.0.0.1:{port}"], model="m") as reference:
            whole = await reference.generate(prompt, max_tokens=200, sampling=GREEDY)
        tg.cancel_scope.cancel()
    return turn, stats, up, whole


async def test_a_turn_that_stalls_mid_stream_goes_on_elsewhere_from_its_tokens() -> None:
    """The first server streams the start of the turn (the first token, then a
    chunk of 64) and stalls; after ``stall_timeout_s`` the pool takes it out and the
    other server continues from those 65 tokens with ``max_tokens`` less them: the
    turn equals one generated whole, and no token was generated twice."""
    prompt = FakeByteTokenizer().encode_prompt([{"role": "user", "content": "What is 12*34?"}])
    healthy, stalling = FakeVLLM(), stalling_vllm(FakeModelServer(), events=2)
    turn, stats, up, whole = await through(stalling, healthy, prompt, stall_timeout_s=0.3)
    assert (turn.token_ids, turn.logprobs, turn.finish_reason) == (whole.token_ids, whole.logprobs, whole.finish_reason)
    assert (stats.stalls, stats.failovers, stats.tokens_kept, up, stalling.stalled) == (1, 1, 65, False, 1)
    continued = [r.body for r in healthy.log if r.path == "/v1/completions"][0]
    assert len(whole.token_ids) > 65
    assert continued["prompt"] == prompt + whole.token_ids[:65] and continued["max_tokens"] == 200 - 65  # type: ignore[index]


async def test_a_request_past_the_outer_bound_moves_but_its_server_stays() -> None:
    """No stall watch, a request bound of 0.3 s: a request that outlives it moves
    on from its tokens, and its server, slow rather than hung, stays in rotation."""
    prompt = FakeByteTokenizer().encode_prompt([{"role": "user", "content": "What is 5*6?"}])
    slow = stalling_vllm(FakeModelServer(), events=1)
    turn, stats, up, whole = await through(slow, FakeVLLM(), prompt, stall_timeout_s=None, request_timeout_s=0.3)
    assert (turn.token_ids, turn.finish_reason) == (whole.token_ids, "stop")
    assert (stats.overdue, stats.stalls, stats.tokens_kept, up) == (1, 0, 1, True)
