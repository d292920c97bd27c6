"""``rstar2 train``: the rStar2 recipe, read top to bottom.

    for stage in stages:                      # sft, rl-8k, rl-12k, rl-hard
        sft:  cross-entropy on assistant tokens, then export + sync
        rl:   (hard filter: drop problems the policy solves every time)
              for step:  1. batch of problems             (_data.batch_for_step)
                         2-4. rollout, reward             (engine.stream -> groups)
                         5. GRPO-RoC downsample           (selection.roc_downsample)
                         6. GRPO update                   (driver.grpo_step)
                         7. export + weight sync          (_publish.publish)
                         8. metrics, samples, evaluation, checkpoint

On-policy like rStar2: the rollout of step k+1 starts after the sync of step k
(``run.max_staleness > 0`` runs it one step ahead: ``_ahead``).  ``run.mode =
"streaming"`` never stops rolling out (``_streaming``): the same loop takes each
step's groups from the stream instead (both are a ``RolloutSource``).  The learner runs in
a worker thread (torch releases the GIL), so the event loop keeps serving progress,
health polls and a rollout running ahead while the update runs.

State that makes resume exact (in each checkpoint): stage index, step within the
stage, weight version, the hard-filtered problem ids, and the learner's model,
optimizer, scheduler and RNG states.  Batches are a pure function of (seed, stage,
step), so a resumed run draws the same next batch.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import msgspec

from backends import SyncReport

from ..config import InferenceConfig, StageConfig, TrainConfig, to_toml
from ..errors import TrainError
from ..rollout import collect_frozen_garbage
from ..types import Group, Problem
from ._ahead import RolloutSource, rollout_batch, rollouts
from ._announce import announce_start
from ._data import batch_for_step, load_problems
from ._evaluate import evaluate_run
from ._hard_filter import solved_every_time
from ._health import HealthWatch, update_metrics
from ._infra import InfraBreaker
from ._metrics import MetricsWriter, plot_metrics, read_metrics, write_samples
from ._progress import StepBar, print_step
from ._publish import Publisher, check_servers
from ._seeding import step_sampling, stream_sampling
from ._stack import RolloutStack, rollout_stack
from ._state import RolloutResult, StreamState, TrainState, TrainSummary, oldest_version, prepare_model
from ._streaming import QUEUE_FILE, read_queue, streaming_rollouts
from ._sync_check import SyncCheck
from ._trajectories import record_options, record_step
from ._weights import publish_weights

if TYPE_CHECKING:
    from ..learn import LearnerDriver

__all__ = ["Trainer"]

P = ParamSpec("P")
T = TypeVar("T")

SWITCH_INTERVAL_S: Final = 1e-4
"""The GIL's switch interval while a run trains.  The learner runs in a worker thread
beside the rollouts' event loop; at Python's default (5 ms) each of its many small
ops may wait that long for a GIL that a busy loop holds (benchmarks/learner_beside_loop.py,
quiet 2-core machine: a tiny model's step 0.056 s alone, 6.0 s beside a busy loop
at 5 ms, 0.16 s at 0.1 ms, for 4% of the loop's throughput)."""


class Trainer:
    """Runs a :class:`TrainConfig` in ``run_dir``.  Construct, then ``await run()``."""

    def __init__(self, config: TrainConfig, *, resume: bool) -> None:
        self.config = config
        self.run_dir = Path(config.run.out_dir) / config.run.name
        self.resume = resume
        self.phase_seconds = dict.fromkeys(["rollout", "reward", "update", "sync", "eval", "sft"], 0.0)
        self.state = TrainState()
        self.stopped = False
        self._work: anyio.CancelScope | None = None
        self._learner_lock = anyio.CapacityLimiter(1)
        self.health = HealthWatch()  # a resumed run's history is read when the run starts
        self.infra = InfraBreaker(config.run.max_infra_failed_rate)
        self.checkpoint_files: Callable[[], dict[str, bytes] | None] | None = None
        """More state for each checkpoint: the current RL stage's source's (a streaming
        stage's queued groups)."""

    def stop(self) -> None:
        """Stop at the next safe point: running rollouts and evaluations are cancelled,
        a learner step under way finishes, a checkpoint is written, and :meth:`run`
        returns a summary with ``stopped`` set (``--resume`` continues the run).
        SIGTERM calls this on rank 0, so a scheduler's preemption loses at most the
        rollout in progress."""
        self.stopped = True
        if self._work is not None:
            self._work.cancel()

    async def _learn(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Learner work off the event loop, one call at a time (the learner is not
        thread-safe)."""
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self._learner_lock)

    async def run(self) -> TrainSummary | None:
        """Run every stage; returns the summary on rank 0 and None on the other ranks
        of a multi-rank learner (they follow rank 0's learner calls)."""
        previous = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        try:
            return await self._run()
        finally:
            sys.setswitchinterval(previous)

    async def _run(self) -> TrainSummary | None:
        from ..learn import Learner, LearnerDriver, barrier, follow, init_distributed

        t0 = time.monotonic()
        rank, _ = await self._learn(init_distributed)
        if rank == 0:
            prepare_model(self.config.model, self.run_dir)  # one builder; the others wait
        await self._learn(barrier)
        base = prepare_model(self.config.model, self.run_dir)  # built by now: just the path
        learner = await self._learn(Learner, self.config.learner, base)
        if learner.rank != 0:
            # torchrun passes a SIGTERM to every rank: the others keep following rank 0,
            # which stops at a safe point and has them join its checkpoint, then ends.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            await self._learn(follow, learner)
            return None
        self.driver: LearnerDriver = LearnerDriver(learner)
        try:
            self._check_run_dir()
            async with anyio.create_task_group() as tg:
                await tg.start(self._stop_on_sigterm)
                await self._lead(base)
                tg.cancel_scope.cancel()
        finally:
            await self._learn(self.driver.close)
        plots = plot_metrics(self.run_dir / "metrics.jsonl", self.run_dir / "plots")
        summary = TrainSummary(
            run_dir=str(self.run_dir), rl_steps=self.state.rl_step, wall_s=time.monotonic() - t0, evals=self.state.evals,
            phase_seconds=self.phase_seconds, plots=[str(p) for p in plots], stopped=self.stopped,
        )  # fmt: skip
        (self.run_dir / "summary.json").write_bytes(msgspec.json.format(msgspec.json.encode(summary)) + b"\n")
        return summary

    async def _lead(self, base: Path) -> None:
        """Rank 0: drive the learner (and the other ranks' copies) through every stage."""
        self.queued: dict[int, Group] = {}  # a streaming stage's, from the checkpoint
        if self.resume:
            saved = await self._learn(self.driver.load_checkpoint, self.run_dir / "checkpoints")
            if saved is not None:
                self.state = msgspec.convert(saved, TrainState)
                if self.state.stream is not None:
                    from ..learn import latest_checkpoint

                    self.queued = read_queue((latest_checkpoint(self.run_dir / "checkpoints") / QUEUE_FILE).read_bytes())  # type: ignore[operator]
        weights = Path(self.state.weights_dir) if self.state.weights_dir else base
        if self.state.weights_dir and not weights.is_dir():
            # A later step's sync replaced this export before the run was killed (only
            # the newest is kept); the learner holds its weights again: write them back.
            await self._learn(self.driver.export, weights)
            publish_weights(weights, self.config.stage_rollout(self.state.stage))
        c = self.config
        streaming = c.run.mode == "streaming"
        weight_sync = msgspec.structs.replace(c.weight_sync, pause_mode=c.weight_sync.pause_mode or ("abort" if streaming else "wait"))
        pool = msgspec.structs.replace(c.pool, order=c.pool.order or ("session" if streaming else "budget"))
        async with rollout_stack(
            rollout=c.rollout, inference=c.inference or InferenceConfig(model="policy"), sandbox=c.sandbox,
            model_dir=None if c.inference else weights, tokenizer_dir=base, local_server=c.server, pool=pool,
            reward=c.reward, log_dir=self.run_dir, weight_sync=weight_sync,
        ) as stack:  # fmt: skip
            announce_start(c, base, stack.engine.tokenizer)
            check = SyncCheck(self._learn, self.driver, c.learner.precision, enabled=c.weight_sync.verify)
            await check_servers(stack, weights, self.state.weight_version, check)  # refuses what cannot sync exactly
            records = read_metrics(self.run_dir / "metrics.jsonl")  # resumed: its medians too
            self.health = HealthWatch(records, precision=c.learner.precision, stop=c.run.stop_on_health)
            async with Publisher(stack, self._learn, self.driver, current=weights, check=check) as self.publisher:
                with MetricsWriter(self.run_dir) as metrics, anyio.CancelScope() as self._work:
                    if self.stopped:  # asked before the work began
                        self._work.cancel()
                    for index in range(self.state.stage, len(c.stages)):
                        stage = c.stages[index]
                        if stage.kind == "sft":
                            await self._sft_stage(stack, stage, metrics)
                        else:
                            await self._rl_stage(stack, index, stage, metrics)
                        self.state.stage, self.state.step_in_stage = index + 1, 0
                    if not self.state.evals or self.state.evals[-1]["rl_step"] != self.state.rl_step:
                        await self._evaluate(stack, metrics, "final")
                if self.stopped and self.state.stage < len(c.stages):
                    with anyio.CancelScope(shield=True):
                        await self._checkpoint(self.state.step_in_stage)

    # --- stages -------------------------------------------------------------------

    async def _sft_stage(self, stack: RolloutStack, stage: StageConfig, metrics: MetricsWriter) -> None:
        from ..learn import load_chat_jsonl

        seqs = load_chat_jsonl(stage.data, self.driver.learner.model_path, max_tokens=self.config.server.max_model_len,
                               chat_template=self.config.rollout.chat_template)  # fmt: skip
        t0 = time.monotonic()
        with StepBar(stage.name, stage.steps, self.state.step_in_stage) as bar:
            for step in range(self.state.step_in_stage, stage.steps):
                with anyio.CancelScope(shield=True):  # a stop comes between steps, never inside one
                    await self._set_lr(stage, step)
                    batch = batch_for_step(seqs, stage.batch_problems, seed=self.config.run.seed, stage=self.state.stage, step=step)
                    stats = await self._learn(self.driver.sft_step, batch)
                    self.state.step_in_stage = step + 1
                metrics.write(self.driver.learner.global_step, {"sft/loss": stats.loss, "sft/grad_norm": stats.grad_norm, "sft/lr": stats.lr})
                bar.advance(f"loss {stats.loss:.4f}")
                await anyio.lowlevel.checkpoint()  # where a stop takes effect
        self.phase_seconds["sft"] += time.monotonic() - t0
        await self._export_and_sync()
        await self._evaluate(stack, metrics, stage.name)
        await self._checkpoint(stage.steps)

    async def _rl_stage(self, stack: RolloutStack, index: int, stage: StageConfig, metrics: MetricsWriter) -> None:
        problems = load_problems(stage.data, fields=self.config.data)
        if stage.reset_optimizer and self.state.step_in_stage == 0:
            await self._learn(self.driver.reset_optimizer)
        if stage.hard_filter_samples:
            problems = await self._hard_problems(stack, stage, problems)

        async with self._source(stack, index, stage, problems) as source:
            # Left set if the stage is stopped: the stop's checkpoint keeps the source's state too.
            self.checkpoint_files = source.checkpoint_files
            for step in range(self.state.step_in_stage, stage.steps):
                done = await source.take(step)  # steps 1-5
                await self.learn_step(stack, stage, step, done, metrics, extra=source.step_metrics)  # steps 6-8
                source.trained(done)
                await self.after_step(stack, stage, step, metrics)
        self.checkpoint_files, self.state.stream = None, None

    def _source(
        self, stack: RolloutStack, index: int, stage: StageConfig, problems: list[Problem]
    ) -> AbstractAsyncContextManager[RolloutSource]:
        """Where the stage's steps take their groups from: a stream (``run.mode =
        "streaming"``), or a rollout per step, one step ahead when staleness allows."""
        if self.config.run.mode == "streaming":
            queued, self.queued = self.queued, {}
            state = self.state.stream = self.state.stream or StreamState()
            sampling = stream_sampling(self.config, stage.name, self.state.step_in_stage)
            return streaming_rollouts(
                stack, index, stage, problems, run=self.config.run, state=state, queued=queued, sampling=sampling
            )

        async def rollout(step: int) -> RolloutResult:  # steps 1-5
            batch = batch_for_step(problems, stage.batch_problems, seed=self.config.run.seed, stage=index, step=step)
            sampling = step_sampling(self.config, stage.name, step)
            return await rollout_batch(stack.engine, stage, batch, step, seed=self.config.run.seed, sampling=sampling)

        return rollouts(rollout, end=stage.steps, ahead=self.config.run.max_staleness > 0)

    async def learn_step(
        self,
        stack: RolloutStack,
        stage: StageConfig,
        step: int,
        done: RolloutResult,
        metrics: MetricsWriter,
        *,
        extra: Callable[[], dict[str, float]] = dict,
    ) -> None:
        """Steps 6-8 on a rollout's groups: update, export, sync, and the step's record
        (shielded: an update, its sync and its record go together)."""
        with anyio.CancelScope(shield=True):
            await self._set_lr(stage, step)
            values = await self._update(stack, stage, done)
            self.state.rl_step += 1
            self.state.step_in_stage = step + 1
            values.update(extra())
            values["runtime/gc_collected"], values["runtime/gc_full_s"] = collect_frozen_garbage()
            self.health.check(self.state.rl_step, values)  # warns when the mismatch or the ratio jumps
            record = partial(record_step, self.run_dir / "trajectories", self.state.rl_step, stage.name, done.decisions,
                             stack.engine.tokenizer, **record_options(self.config.run))  # fmt: skip
            values["record/written"], values["record/skipped"] = await anyio.to_thread.run_sync(record)  # for `rstar2 view`
            metrics.write(self.state.rl_step, {"stage": stage.name, **values})
            print_step(self.state.rl_step, stage.name, step + 1, stage.steps, values)
            self.infra.observe(self.state.rl_step, done.groups)  # stops a run whose infrastructure keeps failing
            self.health.enforce()  # run.stop_on_health: the step is recorded, then the run stops

    async def after_step(self, stack: RolloutStack, stage: StageConfig, step: int, metrics: MetricsWriter) -> None:
        """The evaluation and the checkpoint a step may be due."""
        every = self.config.run.eval_every
        if every and self.state.rl_step % every == 0:
            await self._evaluate(stack, metrics, stage.name)
        if (step + 1) % self.config.run.checkpoint_every == 0 or step + 1 == stage.steps:
            with anyio.CancelScope(shield=True):
                await self._checkpoint(step + 1)

    async def _update(self, stack: RolloutStack, stage: StageConfig, done: RolloutResult) -> dict[str, Any]:
        """GRPO on the kept groups, then export and sync; returns the step's metrics."""
        if self.config.run.samples_per_step:
            await anyio.to_thread.run_sync(partial(
                write_samples, self.run_dir / "samples.jsonl", done.groups, self.config.run.samples_per_step,
                rl_step=self.state.rl_step + 1, stage=stage.name,
            ))  # fmt: skip
        oldest = self.state.weight_version - self.config.run.max_staleness
        fresh = done.trained = [g for g in done.kept if oldest_version(g, oldest) >= oldest]
        values = update_metrics(done, fresh, self.state.weight_version)
        update_s = sync_s = 0.0
        if fresh:  # a batch where every group was all-right or all-wrong teaches nothing
            t1 = time.monotonic()
            stats = await self._learn(self.driver.grpo_step, fresh, self.state.weight_version)
            update_s = time.monotonic() - t1
            values.update({f"learner/{k}": v for k, v in msgspec.structs.asdict(stats).items()})
            sync_s, report = await self._export_and_sync()
            values["sync/probe_diff_max"] = self.publisher.probe_diff_max
            values["sync/removed"], values["sync/timed_out"] = len(report.removed), len(report.timed_out)
        timings = {"rollout": done.seconds, "reward": done.reward_seconds, "update": update_s, "sync": sync_s}
        for phase, seconds in timings.items():
            values[f"time/{phase}_s"] = seconds
            self.phase_seconds[phase] += seconds
        values["weight_version"] = self.state.weight_version
        return values

    async def _hard_problems(self, stack: RolloutStack, stage: StageConfig, problems: list[Problem]) -> list[Problem]:
        """rStar2 stage 3: keep problems the current policy does not solve every time."""
        if stage.name not in self.state.hard_problems:
            solved_all = await solved_every_time(stack.engine, problems, stage)
            self.state.hard_problems[stage.name] = [p.id for p in problems if p.id not in solved_all]
        keep = set(self.state.hard_problems[stage.name])
        hard = [p for p in problems if p.id in keep]
        if not hard:
            raise TrainError(f"stages[{stage.name}]: the policy solves every problem of {stage.data}; nothing is hard")
        return hard

    # --- weights, evaluation, checkpoints --------------------------------------------

    async def _export_and_sync(self) -> tuple[float, SyncReport]:
        t0 = time.monotonic()
        version = self.state.weight_version + 1
        out = self.run_dir / "weights" / f"v{version:06d}"
        report = await self.publisher.publish(out, version, self.config.stage_rollout(self.state.stage))
        self.state.weight_version, self.state.weights_dir = version, str(out)
        return time.monotonic() - t0, report

    async def _evaluate(self, stack: RolloutStack, metrics: MetricsWriter, label: str) -> None:
        if not self.config.eval.data:
            return
        t0 = time.monotonic()
        record = await evaluate_run(stack.engine, self.config, self.state.rl_step, label, self.run_dir / "eval")
        self.state.evals.append(record)
        seconds = time.monotonic() - t0
        values = {f"eval/{k}": v for k, v in record.items() if k not in ("rl_step", "stage")}
        metrics.write(self.state.rl_step, {**values, "time/eval_s": seconds})  # stacked on the step's phases
        self.phase_seconds["eval"] += seconds

    async def _checkpoint(self, step_in_stage: int) -> None:
        await self.publisher.written()  # the checkpoint names the export: on disk first
        self.state.step_in_stage = step_in_stage
        root = self.run_dir / "checkpoints"
        files = self.checkpoint_files() if self.checkpoint_files else None  # it updates the state: first
        try:
            await self._learn(self.driver.save_checkpoint, root, state=msgspec.to_builtins(self.state), files=files)
        except OSError as exc:  # e.g. a full disk: the checkpoint is atomic, so nothing older is lost
            from ..learn import latest_checkpoint

            last = latest_checkpoint(root)
            kept = f"the last complete checkpoint, {last}, is intact" if last else "no earlier checkpoint exists"
            raise TrainError(
                f"writing the checkpoint at step {step_in_stage} of stage "
                f"{self.config.stages[self.state.stage].name!r} failed ({exc}); {kept}: "
                "free space and run again with --resume"
            ) from exc

    async def _set_lr(self, stage: StageConfig, step: int) -> None:
        peak = stage.lr or self.config.learner.lr
        decay = 1.0 - step / stage.steps if stage.lr_decay == "linear" else 1.0
        await self._learn(self.driver.set_peak_lr, peak * decay)

    # --- set-up ---------------------------------------------------------------------

    def _check_run_dir(self) -> None:
        has_checkpoint = (self.run_dir / "checkpoints").is_dir() and any((self.run_dir / "checkpoints").iterdir())
        if has_checkpoint and not self.resume:
            raise TrainError(
                f"{self.run_dir} already holds a run: pass --resume to continue it, or set run.name to start another"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.toml").write_text(to_toml(self.config))

    async def _stop_on_sigterm(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            task_status.started()
            async for _ in signals:
                self.stop()
