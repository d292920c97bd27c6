"""fleetsim's streaming trainer (benchmarks/streaming.py runs it at scale), on a small setup: what its sync modes
do to the turns in flight and the caches, and that its account of the fleet's time
adds up (the full benchmark runs rStar2's stage 1 on 16 servers for ~45 min)."""

from __future__ import annotations

import pytest

from fleetsim import DIAGNOSTICS, POLICIES, Setup, Trainer

SMALL = Setup(steps=3, servers=2, batch=4, samples=4, keep=2, max_in_flight=64)


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    names = ["streaming_s1", "streaming_s1_keep_kv", "streaming_s1_no_sync"]
    return {name: Trainer(SMALL, {**POLICIES, **DIAGNOSTICS}[name], seed=0).run() for name in names}


def test_abort_interrupts_turns_and_keep_freezes_them(rows: dict[str, dict]) -> None:
    abort, keep = rows["streaming_s1"], rows["streaming_s1_keep_kv"]
    assert abort["turns_aborted"] > 0
    assert keep["turns_aborted"] == 0
    # Kept KV and caches: nothing to recompute after a sync.
    assert keep["prefill_tokens"] < abort["prefill_tokens"]
    for row in (abort, keep):
        assert row["groups_wasted"] == 0
        assert set(row["staleness"]) <= {0, 1}


def test_no_sync_is_a_yardstick_whose_groups_are_too_stale(rows: dict[str, dict]) -> None:
    row = rows["streaming_s1_no_sync"]
    assert row["groups_wasted"] > 0
    assert row["time_idle"] < rows["streaming_s1"]["time_idle"]  # no pause


def test_the_fleets_time_adds_up(rows: dict[str, dict]) -> None:
    for row in rows.values():
        shares = [row[k] for k in ("time_work", "time_below_full_cache", "time_prefill_bound", "time_idle")]
        assert all(-1e-9 <= x <= 1 for x in shares), shares
        assert sum(shares) == pytest.approx(1.0)
        assert row["bound_prompt_credit"] >= 0
