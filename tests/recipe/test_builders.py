"""The parts built from configuration, as the defaults leave them."""

from __future__ import annotations

from rstar2_async.config import InferenceConfig, PoolConfig
from rstar2_async.recipe._builders import server_pool


def test_a_dead_server_costs_an_in_flight_turn_well_under_a_second_before_it_moves() -> None:
    """The pool moves a turn off a failed server; the server's own client retries
    first.  With the defaults, all of its retries' waits together are at most 0.1 s
    (a refused connection fails at once), where they were 8-15 s (5 retries)."""
    pool = server_pool(InferenceConfig(), PoolConfig(), "vllm")
    retry = pool.servers[0].client.retry
    worst = sum(min(retry.max_s, retry.initial_s * 2 ** (attempt - 1)) for attempt in range(1, retry.max_retries + 1))
    assert retry.max_retries == 1 and worst <= 0.1
    assert pool.stall_timeout_s == 60.0 and pool.request_timeout_s == 3600.0
