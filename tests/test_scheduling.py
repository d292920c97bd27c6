"""The two-worker suite's turns on the box (tests/conftest.py): a ``solo`` test waits
for the tests running beside it and holds back those that start after it."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.conftest import box_turn


def _enter(out: Path, *, solo: bool, inside: threading.Event, leave: threading.Event) -> threading.Thread:
    def run() -> None:
        with box_turn(out, solo=solo):
            inside.set()
            leave.wait()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_solo_test_waits_for_the_running_test_and_holds_back_the_next(tmp_path: Path) -> None:
    running, solo, later = ({"inside": threading.Event(), "leave": threading.Event()} for _ in range(3))
    threads = [_enter(tmp_path, solo=False, **running)]
    assert running["inside"].wait(10)
    threads.append(_enter(tmp_path, solo=True, **solo))
    assert not solo["inside"].wait(0.3), "the solo test started beside a running test"
    threads.append(_enter(tmp_path, solo=False, **later))
    assert not later["inside"].wait(0.3), "a later test passed a waiting solo test"

    running["leave"].set()
    assert solo["inside"].wait(10)
    assert not later["inside"].wait(0.3), "a later test started beside the solo test"
    solo["leave"].set()
    assert later["inside"].wait(10)
    later["leave"].set()
    for thread in threads:
        thread.join(10)


def test_two_ordinary_tests_share_the_box(tmp_path: Path) -> None:
    first, second = ({"inside": threading.Event(), "leave": threading.Event()} for _ in range(2))
    threads = [_enter(tmp_path, solo=False, **first), _enter(tmp_path, solo=False, **second)]
    assert first["inside"].wait(10) and second["inside"].wait(10)
    first["leave"].set()
    second["leave"].set()
    for thread in threads:
        thread.join(10)
