"""A training run under chaos (``benchmarks/train_chaos.py`` runs it on the real parts:
two vLLM servers, the DeepSpeed learner, two jailed sandbox services; its short test
in the suite on the server and learner doubles).

Faults (:func:`inject_faults`, driven by what the run writes to its directory, so the
same schedule strikes a trainer in this process or in another):

- every second, a sandbox worker is SIGKILLed (a random one of either service);
- once step 1 is recorded, the first server to get a completion of step 2's rollout
  is stopped (as by SIGSTOP) for ``stall_s``, longer than the pool's
  ``stall_timeout_s``: its turns move to the other server with their tokens, and it
  is back once it answers;
- once step 2 is recorded, the first server the next sync pauses is stopped for
  ``sync_stop_s``, longer than the sync's deadline: the sync takes it out and
  goes on with the other; it is resumed and loaded when it answers again;
- once step 3 is recorded, sandbox service 0 is killed as step 4's rollout asks
  for its first completion, and restarted ``service_down_s`` later on the same
  port: its calls go to service 1 meanwhile.

Figures (:func:`chaos_figures`, from the run directory): ``lost_groups`` (a step's
problems without a recorded group), ``infra_failed_trained`` (a trajectory that met
an infrastructure failure and that GRPO-RoC kept: trained on), ``sync_deadline_hits``
(servers syncs took out for missing ``[weight_sync] timeout_s``), and each step's
time in rollout and sync (``step_s``).
"""

from __future__ import annotations

import json
import os
import random
import signal
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc

from sandbox import SandboxConfig, SandboxPool, SandboxService

__all__ = ["Chaos", "ProcessGroup", "RestartableService", "chaos_figures", "inject_faults"]


class Stoppable(Protocol):
    """A server that can be stopped and continued: a process group, or a test
    double (``FakeVLLM`` has both)."""

    def stop(self) -> None: ...

    def cont(self) -> None: ...


@dataclass
class ProcessGroup:
    """A server's whole process tree (its own process group): SIGSTOP and SIGCONT."""

    pgid: int

    def stop(self) -> None:
        os.killpg(self.pgid, signal.SIGSTOP)

    def cont(self) -> None:
        os.killpg(self.pgid, signal.SIGCONT)


@dataclass
class RestartableService:
    """A sandbox service of its own pool on a fixed loopback port, in this process:
    :meth:`kill` takes it down as a killed process goes (listener, connections and
    workers gone), :meth:`start` brings a fresh one up on the same port."""

    port: int
    secret: str
    config: SandboxConfig
    task_group: anyio.abc.TaskGroup
    pool: SandboxPool | None = None
    _scope: anyio.CancelScope | None = None
    _stopped: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._stopped = anyio.Event()
        await self.task_group.start(self._run)

    async def kill(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            await self._stopped.wait()

    async def _run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                async with SandboxPool(self.config) as self.pool, anyio.create_task_group() as tg:
                    await tg.start(SandboxService(self.pool, port=self.port, secret=self.secret).serve)
                    task_status.started()
        finally:
            self.pool = None
            self._stopped.set()


@dataclass
class Chaos:
    """What :func:`inject_faults` strikes, and how long each stop lasts."""

    servers: Callable[[], Sequence[Stoppable]]
    """The two servers, once they run (asked when a stop is due)."""
    requests: Callable[[int, str], int]
    """How many requests to a path (``/v1/completions``, ``/pause``) server ``i``
    has had so far (its access log; a double's record): what times the stops."""
    services: Sequence[RestartableService]
    stall_s: float
    sync_stop_s: float
    service_down_s: float = 3.0
    counts: Counter[str] = field(default_factory=Counter)
    seed: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)
    """Set once the schedule has struck its last fault."""


async def inject_faults(run_dir: Path, chaos: Chaos) -> None:
    """Strike ``chaos``'s faults on the schedule of the module docstring, as the run in
    ``run_dir`` records its steps and the servers log their requests; runs until
    cancelled (the schedule ends after step 4's rollout; the worker kills go on)."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(_kill_workers, chaos)
        await _steps_recorded(run_dir, 1)
        generating = await _next_request(chaos, "/v1/completions", run_dir, 3)
        if generating is not None:
            await _stop_for(chaos.servers()[generating], chaos.stall_s, chaos.counts, "server_stopped_generating")
        await _steps_recorded(run_dir, 2)
        syncing = await _next_request(chaos, "/pause", run_dir, 4)  # the next sync has begun: its load comes next
        if syncing is not None:
            await _stop_for(chaos.servers()[syncing], chaos.sync_stop_s, chaos.counts, "server_stopped_syncing")
        await _steps_recorded(run_dir, 3)
        await _next_request(chaos, "/v1/completions", run_dir, 4)  # step 4's rollout (or past it)
        await chaos.services[0].kill()
        chaos.counts["service_killed"] += 1
        await anyio.sleep(chaos.service_down_s)
        await chaos.services[0].start()
        chaos.counts["service_restarted"] += 1
        chaos.done.set()
        await anyio.sleep_forever()


async def _next_request(chaos: Chaos, path: str, run_dir: Path, by_step: int) -> int | None:
    """Until a server gets a new request to ``path`` (logs: polled): its index; None
    if the run records step ``by_step`` first (on a loaded box a step can pass
    between two polls, and the last one's requests never come)."""
    before = [chaos.requests(i, path) for i in range(2)]
    while True:
        for i in range(2):
            if chaos.requests(i, path) > before[i]:
                return i
        if len(_rl_records(run_dir)) >= by_step:
            return None
        await anyio.sleep(0.02)


async def _kill_workers(chaos: Chaos) -> None:
    """A SIGKILL a second, to a worker serving a slot: never one still starting (under
    load a start outlasts the second, and a pool gives up on a slot whose starts keep
    failing, as ``sandbox_soak`` found)."""
    rng = random.Random(chaos.seed)
    while True:
        await anyio.sleep(1.0)
        pids = sorted(pid for s in chaos.services if s.pool is not None for pid in s.pool.ready_pids())
        if pids:
            try:
                os.kill(rng.choice(pids), signal.SIGKILL)
                chaos.counts["worker_killed"] += 1
            except ProcessLookupError:  # it died meanwhile
                pass


async def _stop_for(server: Stoppable, seconds: float, counts: Counter[str], name: str) -> None:
    server.stop()
    counts[name] += 1
    try:
        await anyio.sleep(seconds)
    finally:
        server.cont()  # cancelled too: never leave a server stopped


async def _steps_recorded(run_dir: Path, steps: int) -> None:
    """Until ``metrics.jsonl`` holds ``steps`` RL steps (a file the run appends to: polled)."""
    while len(_rl_records(run_dir)) < steps:
        await anyio.sleep(0.1)


def _rl_records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the last line half-written
            continue
        if "rollout/trajectories" in record:
            records.append(record)
    return records


def chaos_figures(run_dir: Path, batch_problems: int) -> dict[str, Any]:
    """The run's invariants and step times (see the module docstring)."""
    records = _rl_records(run_dir)
    index = run_dir / "trajectories" / "index.jsonl"
    rows = [json.loads(line) for line in index.read_text().splitlines()] if index.is_file() else []
    # IndexRow is array-like: step 2, problem_id 3, finish_reason 10, roc 12
    problems: dict[int, set[str]] = {}
    for row in rows:
        problems.setdefault(row[2], set()).add(row[3])
    lost = sum(batch_problems - len(problems.get(r["step"], ())) for r in records)
    errors = [row for row in rows if row[10] == "error"]
    trained_errors = [row for row in errors if row[12] == "kept"]
    return {
        "steps": len(records),
        "lost_groups": lost,
        "infra_failed_trained": len(trained_errors),
        "infra_failed": len(errors),
        "sync_deadline_hits": int(sum(r.get("sync/timed_out", 0) for r in records)),
        "step_s": [round(r.get("time/rollout_s", 0.0) + r.get("time/sync_s", 0.0), 2) for r in records],
    }
