"""The dispatch policy with literal loads: no I/O, no clock."""

from __future__ import annotations

import anyio
import pytest

from backends._dispatch import Dispatcher, NoServerUp, ServerLoad, Ticket


def test_most_free_budget_wins_and_release_returns_it() -> None:
    d = Dispatcher([1000, 1000, 1000])
    a = d.acquire_nowait(600)
    b = d.acquire_nowait(500)
    c = d.acquire_nowait(400)
    assert sorted([a.server, b.server, c.server]) == [0, 1, 2]
    # Free: 400, 500, 600 (in some order): the next 300 goes where 600 is free.
    d2 = d.acquire_nowait(300)
    assert d2.server == c.server
    d.release(a)
    assert d.acquire_nowait(900).server == a.server
    stats = d.statistics()
    assert stats.in_flight == 4 and stats.dispatched == 5
    assert sum(s.reserved_tokens for s in stats.servers) == 500 + 400 + 300 + 900


def test_no_room_would_block_until_a_release() -> None:
    d = Dispatcher([1000, 1000])
    t1, t2 = d.acquire_nowait(800), d.acquire_nowait(800)
    with pytest.raises(anyio.WouldBlock):
        d.acquire_nowait(300)
    assert d.statistics().blocked == 1
    d.release(t2)
    assert d.acquire_nowait(300).server == t2.server
    d.release(t1)


def test_observed_usage_counts_when_above_reservations() -> None:
    d = Dispatcher([1000, 1000])
    d.observe(0, ServerLoad(capacity_tokens=1000, used_tokens=900))  # another client's load
    assert d.acquire_nowait(200).server == 1
    d.observe(1, ServerLoad(capacity_tokens=4000, used_tokens=0))  # capacity from the server
    assert d.statistics().servers[1].capacity_tokens == 4000
    assert d.acquire_nowait(3500).server == 1


def test_later_turns_stay_on_their_server_unless_overloaded() -> None:
    d = Dispatcher([1000, 1000], affinity_slack=0.25)
    first = d.acquire_nowait(100, session="p")
    d.release(first)
    home, away = first.server, 1 - first.server
    load = d.acquire_nowait(200)  # most free: home and away tie at 1000, either may take it
    d.release(load)
    d.observe(home, ServerLoad(capacity_tokens=1000, used_tokens=200))  # 200 behind: within the slack
    again = d.acquire_nowait(100, session="p")
    assert again.server == home
    d.release(again)
    d.observe(home, ServerLoad(capacity_tokens=1000, used_tokens=300))  # 300 behind: overloaded
    moved = d.acquire_nowait(100, session="p")
    assert moved.server == away
    stats = d.statistics()
    assert (stats.affinity_hits, stats.affinity_moves) == (1, 1)


def test_later_turns_leave_a_server_with_a_longer_queue() -> None:
    for slack, expected in ((3, 0), (2, 1), (None, 0)):
        d = Dispatcher([100_000, 100_000], affinity_queue_slack=slack)
        d.release(d.acquire_nowait(100, session="p"))  # home: server 0
        d.observe(1, ServerLoad(capacity_tokens=100_000, used_tokens=5000))  # within the budget slack
        busy = [d.acquire_nowait(10) for _ in range(3)]
        assert [t.server for t in busy] == [0, 0, 0]  # most free budget: 3 in flight vs 0
        assert d.acquire_nowait(100, session="p").server == expected, slack


def test_session_waits_rather_than_overflowing() -> None:
    d = Dispatcher([1000, 1000], affinity_slack=1.0)
    d.observe(0, ServerLoad(capacity_tokens=1000, used_tokens=700))
    d.observe(1, ServerLoad(capacity_tokens=1000, used_tokens=850))
    with pytest.raises(anyio.WouldBlock):
        d.acquire_nowait(400, session="s")
    assert d.acquire_nowait(250, session="s").server == 0


def test_expected_reservation_follows_the_reported_lengths() -> None:
    d = Dispatcher([100_000], expected_new_tokens=1000)
    t = d.acquire_nowait(300, new_tokens=8000)  # prompt 300 + the first guess
    assert t.tokens == 1300
    capped = d.acquire_nowait(300, new_tokens=200)  # cannot hold more than it may generate
    assert capped.tokens == 500
    d.release(capped)  # aborted: no length reported, the mean stays
    assert d.expected_new_tokens() == 1000
    d.release(t, generated=1000 + 256 * 4)  # the mean moves by 1/256 of the gap
    assert d.expected_new_tokens() == pytest.approx(1004)
    assert d.statistics().expected_new_tokens == pytest.approx(1004)
    assert d.acquire_nowait(0, new_tokens=8000).tokens == 1004
    assert d.acquire_nowait(10).tokens == 10  # without new_tokens: reserved as given


def test_admissions_since_the_last_report_count_on_top_of_it() -> None:
    d = Dispatcher([1000, 1000])
    d.observe(0, ServerLoad(capacity_tokens=1000, used_tokens=500))
    d.observe(1, ServerLoad(capacity_tokens=1000, used_tokens=500))
    a = d.acquire_nowait(300)
    b = d.acquire_nowait(300)
    assert a.server != b.server
    with pytest.raises(anyio.WouldBlock):  # 500 observed + 300 pending on each
        d.acquire_nowait(300)
    d.release(a)  # admitted after the report: its pending share goes with it
    assert d.acquire_nowait(300).server == a.server
    d.observe(b.server, ServerLoad(capacity_tokens=1000, used_tokens=400))  # the report now includes b
    stats = d.statistics().servers[b.server]
    assert stats.pending_tokens == 0 and stats.reserved_tokens == 300
    assert d.acquire_nowait(600).server == b.server  # 1000 - max(300, 400) = 600 free
    d.release(b)  # admitted before the report: no pending to give back
    assert d.statistics().servers[b.server].pending_tokens == 600


def test_headroom_is_kept_out_of_admission() -> None:
    d = Dispatcher([1000], headroom=0.2)
    t = d.acquire_nowait(700)
    with pytest.raises(anyio.WouldBlock):
        d.acquire_nowait(200)  # 900 > 800 usable
    d.release(t)
    big = d.acquire_nowait(900)  # larger than the usable cache: admitted alone
    with pytest.raises(anyio.WouldBlock):
        d.acquire_nowait(1)
    d.release(big)


def test_a_finished_turn_holds_its_context_for_the_next_turn() -> None:
    d = Dispatcher([10_000, 10_000], expected_new_tokens=1000, hold_reports=2)
    t = d.acquire_nowait(500, session="s", new_tokens=8000)  # 500 + 1000 reserved
    home, other = t.server, 1 - t.server
    d.release(t, generated=1000)
    assert d.statistics().servers[home].held_tokens == 1500  # prompt + generated, now in the prefix cache
    with pytest.raises(anyio.WouldBlock):  # the held room is not for new sessions
        d.acquire_nowait(10_000 - 1500 - 1000 + 1, session="new", new_tokens=1000, avoid=other)
    again = d.acquire_nowait(1600, session="s", new_tokens=7000)  # context + tool response
    assert again.server == home
    assert d.statistics().servers[home].held_tokens == 0  # the hold became this reservation
    assert d.statistics().servers[home].reserved_tokens == 1600 + 1000


def test_a_held_turn_waits_for_its_server_until_the_hold_expires() -> None:
    d = Dispatcher([10_000, 10_000], expected_new_tokens=1000, hold_reports=2)
    t = d.acquire_nowait(500, session="s", new_tokens=8000)
    home, other = t.server, 1 - t.server
    d.release(t, generated=1000)
    d.observe(home, ServerLoad(capacity_tokens=10_000, used_tokens=8000))  # filled by other clients
    with pytest.raises(anyio.WouldBlock):  # the other server has room, but moving recomputes the context
        d.acquire_nowait(1600, session="s", new_tokens=7000)
    d.observe(home, ServerLoad(capacity_tokens=10_000, used_tokens=8000))  # two reports: the hold ends
    assert d.statistics().servers[home].held_tokens == 0
    assert d.acquire_nowait(1600, session="s", new_tokens=7000).server == other


def test_a_held_turn_may_use_part_of_the_headroom() -> None:
    d = Dispatcher([10_000], expected_new_tokens=1000, headroom=0.1, hold_headroom=0.04)
    t = d.acquire_nowait(500, session="s", new_tokens=8000)
    d.release(t, generated=1000)  # held: 1500
    d.observe(0, ServerLoad(capacity_tokens=10_000, used_tokens=6000))
    # Free for new sessions: 9000 usable - 6000 - 1500 held = 1500.
    with pytest.raises(anyio.WouldBlock):
        d.acquire_nowait(600, session="new", new_tokens=1000)  # 1600 > 1500
    # The held session has its hold and 6% of the headroom besides: 1500 + 1500 + 600 = 3600.
    with pytest.raises(anyio.WouldBlock):
        d.acquire_nowait(2601, session="s", new_tokens=1000)
    assert d.acquire_nowait(2600, session="s", new_tokens=1000).server == 0


def test_holds_end_on_forget_or_a_down_server_and_only_follow_finished_expected_turns() -> None:
    d = Dispatcher([10_000, 10_000], hold_reports=2)
    d.release(d.acquire_nowait(500, session="a", new_tokens=100), generated=100)
    d.release(d.acquire_nowait(500, session="b", new_tokens=100), generated=100)
    assert sum(s.held_tokens for s in d.statistics().servers) == 1200
    d.forget("a")
    server_b = next(i for i, s in enumerate(d.statistics().servers) if s.held_tokens)
    d.set_up(server_b, False)  # a restarted server's cache is empty
    assert sum(s.held_tokens for s in d.statistics().servers) == 0
    d.set_up(server_b, True)
    d.release(d.acquire_nowait(500, session="c", new_tokens=100))  # aborted: nothing to hold
    d.release(d.acquire_nowait(600, session="d"), generated=100)  # legacy reservation: prompt unknown
    d.release(d.acquire_nowait(500, new_tokens=100), generated=100)  # no session
    assert sum(s.held_tokens for s in d.statistics().servers) == 0
    for policy, reports in (("round_robin", 2), ("budget", 0)):
        other = Dispatcher([10_000], policy=policy, hold_reports=reports)
        other.release(other.acquire_nowait(500, session="e", new_tokens=100), generated=100)
        assert other.statistics().servers[0].held_tokens == 0


def test_forget_frees_a_hold_at_once_and_a_later_turn_starts_anew() -> None:
    d = Dispatcher([10_000, 10_000], hold_reports=2)
    t = d.acquire_nowait(500, session="s", new_tokens=100)
    d.release(t, generated=100)
    assert d.statistics().servers[t.server].held_tokens == 600
    d.forget("s")  # the trajectory ended: no report needed
    assert d.statistics().servers[t.server].held_tokens == 0
    d.forget("s")  # twice, or for a session never seen: nothing to do
    d.forget("unknown")
    late = d.acquire_nowait(500, session="s", new_tokens=100)
    d.forget("s")  # forgotten while in flight: its end is not held
    d.release(late, generated=100)
    stats = d.statistics()
    assert sum(s.held_tokens for s in stats.servers) == 0 and stats.affinity_hits + stats.affinity_moves == 0


def test_only_a_sessions_latest_turn_is_held_on_its_server() -> None:
    d = Dispatcher([10_000, 10_000], hold_reports=2)
    older = d.acquire_nowait(500, session="s", new_tokens=100)
    newer = d.acquire_nowait(500, session="s", new_tokens=100, avoid=older.server)  # overtakes it elsewhere
    d.release(older, generated=100)  # not the latest turn: its context is of no use to the session
    assert sum(s.held_tokens for s in d.statistics().servers) == 0
    d.release(newer, generated=100)
    assert d.statistics().servers[newer.server].held_tokens == 600
    assert d.acquire_nowait(700, session="s", new_tokens=100).server == newer.server  # back to its hold


def test_a_session_that_ages_out_takes_its_hold_along(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("backends._dispatch.MAX_SESSIONS", 2)
    d = Dispatcher([10_000], hold_reports=2)
    for session in ("a", "b"):
        d.release(d.acquire_nowait(500, session=session, new_tokens=100), generated=100)
    assert d.statistics().servers[0].held_tokens == 1200
    d.acquire_nowait(500, session="c", new_tokens=100)  # "a" is the least recent: forgotten
    assert d.statistics().servers[0].held_tokens == 600


def test_round_robin_is_static_and_never_blocks() -> None:
    d = Dispatcher([10, 10, 10], policy="round_robin")
    first = [d.acquire_nowait(1000, session=i).server for i in range(6)]
    assert first == [0, 1, 2, 0, 1, 2]
    assert [d.acquire_nowait(5, session=i).server for i in range(6)] == first


def test_down_servers_are_skipped_and_sessions_move() -> None:
    for policy in ("budget", "round_robin"):
        d = Dispatcher([1000, 1000], policy=policy)
        t = d.acquire_nowait(10, session="s")
        d.set_up(t.server, False)
        assert d.acquire_nowait(10, session="s").server != t.server
        d.set_up(1 - t.server, False)
        with pytest.raises(NoServerUp):
            d.acquire_nowait(10)
        d.release(t)  # reservations on a down server are still released


def test_avoid_skips_the_failed_server_unless_it_is_the_only_one() -> None:
    d = Dispatcher([1000, 1000])
    assert d.acquire_nowait(10, avoid=0).server == 1
    d.set_up(1, False)
    assert d.acquire_nowait(10, avoid=0).server == 0


def test_oversized_request_runs_alone_on_an_idle_server() -> None:
    d = Dispatcher([1000, 1000])
    busy = d.acquire_nowait(10)
    big = d.acquire_nowait(5000)
    assert big.server != busy.server
    with pytest.raises(anyio.WouldBlock):
        d.acquire_nowait(5000)


def test_release_twice_is_an_error_and_validation() -> None:
    d = Dispatcher([1000])
    t = d.acquire_nowait(10)
    d.release(t)
    with pytest.raises(RuntimeError, match="released twice"):
        d.release(t)
    with pytest.raises(ValueError, match="capacities"):
        Dispatcher([])
    with pytest.raises(ValueError, match="policy"):
        Dispatcher([1], policy="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="affinity_slack"):
        Dispatcher([1], affinity_slack=2)
    with pytest.raises(ValueError, match="expected_new_tokens"):
        Dispatcher([1], expected_new_tokens=0)
    with pytest.raises(ValueError, match="headroom"):
        Dispatcher([1], headroom=0.95)
    with pytest.raises(ValueError, match="hold_reports"):
        Dispatcher([1], hold_reports=-1)
    with pytest.raises(ValueError, match="hold_headroom"):
        Dispatcher([1], hold_headroom=1.0)
    with pytest.raises(ValueError, match="new_tokens"):
        Dispatcher([1]).acquire_nowait(1, new_tokens=-1)


def test_failed_sizes_are_remembered_only_until_room_can_have_grown() -> None:
    """A request that fit nowhere makes larger ones fail at once (a waiting queue is
    retried on every release) -- but never one that would fit: 20,000 random
    operations decide exactly as a dispatcher that forgets before every request."""
    import math
    import random

    rng = random.Random(7)
    kwargs = {"expected_new_tokens": 300, "headroom": 0.1, "hold_reports": 2}
    fast, slow = Dispatcher([4000, 3000, 5000], **kwargs), Dispatcher([4000, 3000, 5000], **kwargs)
    live: list[tuple[Ticket, Ticket]] = []
    remembered = 0

    def attempt(d: Dispatcher, tokens: int, session: object, avoid: int | None, new: int | None) -> Ticket | type:
        try:
            return d.acquire_nowait(tokens, session, avoid=avoid, new_tokens=new)
        except anyio.WouldBlock as exc:
            return type(exc)

    for _ in range(20_000):
        op = rng.random()
        if op < 0.55:
            args = (rng.choice([50, 400, 900, 2000, 6000]), rng.choice([None, *range(40)]),
                    rng.choice([None, None, 0, 1]), rng.choice([None, 100, 1000]))
            remembered += fast._floor < math.inf
            slow._floor = math.inf  # the reference never remembers a failure
            a, b = attempt(fast, *args), attempt(slow, *args)
            if isinstance(a, Ticket) and isinstance(b, Ticket):
                assert (a.server, a.tokens) == (b.server, b.tokens)
                live.append((a, b))
            else:
                assert a == b
        elif op < 0.85 and live:
            a, b = live.pop(rng.randrange(len(live)))
            generated = rng.choice([None, 10, 250, 700])
            fast.release(a, generated=generated)
            slow.release(b, generated=generated)
        elif op < 0.95:
            server, used = rng.randrange(3), rng.randrange(6000)
            for d in (fast, slow):
                d.observe(server, ServerLoad(capacity_tokens=[4000, 3000, 5000][server], used_tokens=used))
        elif op < 0.98:
            session = rng.randrange(40)
            fast.forget(session)
            slow.forget(session)
        else:
            server, up = rng.randrange(3), rng.random() < 0.7
            fast.set_up(server, up)
            slow.set_up(server, up)
    assert remembered > 1000  # requests met a remembered failure, and were decided alike
    assert fast.statistics() == slow.statistics()
