"""``rstar2 train``: the rStar2 recipe, read top to bottom.

    for stage in stages:                      # sft, rl-8k, rl-12k, rl-hard
        sft:  cross-entropy on assistant tokens, then export + sync
        rl:   (hard filter: drop problems the policy solves every time)
              for step: rollout (engine, streaming groups) -> GRPO-RoC downsample
                        -> GRPO update (DeepSpeed) -> export -> weight sync
                        -> metrics, samples, checkpoint, evaluation

On-policy like rStar2: the rollout of step k+1 starts after the sync of step k.
The learner runs in a worker thread (torch releases the GIL), so the event loop
keeps serving progress, health polls and, with ``run.max_staleness > 0``, the next
rollout while the update runs.

State that makes resume exact (in each checkpoint): stage index, step within the
stage, weight version, the hard-filtered problem ids, and the learner's model,
optimizer, scheduler and RNG states.  Batches are a pure function of (seed, stage,
step), so a resumed run draws the same next batch.
"""

from __future__ import annotations

import random
import shutil
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import msgspec

from .configio import to_toml
from .data import load_problems
from .engine import RolloutEngine
from .evaluate import evaluate
from .metrics import MetricsWriter, plot_metrics
from .progress import StepBar, show_progress
from .roc import roc_downsample
from .stack import RolloutStack, rollout_stack
from .config import InferenceConfig
from .train_config import ModelConfig, StageConfig, TrainConfig
from .types import Group, Problem, Trajectory


class TrainError(RuntimeError):
    """The run cannot start or continue; the message says what to change."""


class TrainState(msgspec.Struct, kw_only=True):
    """What a checkpoint stores besides the learner (JSON)."""

    stage: int = 0
    step_in_stage: int = 0
    rl_step: int = 0
    weight_version: int = 0
    weights_dir: str | None = None
    hard_problems: dict[str, list[str]] = {}
    evals: list[dict[str, Any]] = []


class TrainSummary(msgspec.Struct, frozen=True):
    run_dir: str
    rl_steps: int
    wall_s: float
    evals: list[dict[str, Any]]
    """Each evaluation: ``{"rl_step", "stage", "<set>": accuracy, "accuracy": mean}``."""
    phase_seconds: dict[str, float]
    """Wall seconds spent per phase over the run (rollout, reward, update, sync, eval)."""
    plots: list[str]
    stopped: bool = False
    """Stopped early (SIGTERM, :meth:`Trainer.stop`) after writing a checkpoint: ``--resume`` continues."""


def prepare_model(model: ModelConfig, run_dir: Path) -> Path:
    """The base model directory: ``model.path``, or a tiny model built once into the run."""
    if model.path is not None:
        path = Path(model.path)
        if not (path / "config.json").is_file():
            raise TrainError(f"model.path: {path} is not a model directory (no config.json)")
        return path
    from .tinymodel import build_tiny_model

    assert model.tiny is not None
    out = run_dir / "base-model"
    if not (out / "config.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        t = model.tiny
        build_tiny_model(out, hidden_size=t.hidden_size, num_layers=t.num_layers, vocab_size=t.vocab_size, seed=t.seed)
    return out


def batch_for_step(problems: Sequence[Problem], batch_size: int, *, seed: int, stage: int, step: int) -> list[Problem]:
    """The problems of one step: epochs of seeded permutations, read in order.  A pure
    function of its arguments, so resume draws the same batch."""
    out: list[Problem] = []
    start = step * batch_size
    while len(out) < batch_size:
        epoch, offset = divmod(start + len(out), len(problems))
        order = list(range(len(problems)))
        random.Random(f"{seed}/{stage}/{epoch}").shuffle(order)
        take = min(batch_size - len(out), len(problems) - offset)
        out += [problems[i] for i in order[offset : offset + take]]
    return out


class _TimedScorer:
    """Wraps the grader to measure the wall time during which any grading runs.

    Grading happens inside the rollout, as each trajectory ends, so this time
    overlaps the rollout's; summing per-call durations instead would count
    concurrent gradings several times over."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self._active = 0
        self._since = 0.0

    async def score(self, response_text: str, gold: str) -> float:
        if self._active == 0:
            self._since = time.monotonic()
        self._active += 1
        try:
            return await self.inner.score(response_text, gold)
        finally:
            self._active -= 1
            if self._active == 0:
                self.seconds += time.monotonic() - self._since


class _Rollout:
    """One batch's groups, what RoC kept, and how long it took."""

    def __init__(self) -> None:
        self.groups: list[Group] = []
        self.kept: list[Group] = []
        self.dropped: dict[str, int] = {}
        self.seconds = 0.0
        self.reward_seconds = 0.0


class _Ahead:
    """The result of a rollout running ahead in the stage's task group."""

    def __init__(self) -> None:
        self._done = anyio.Event()
        self._value: _Rollout | None = None

    async def run(self, rollout: Callable[..., Awaitable[_Rollout]], *args: Any) -> None:
        self._value = await rollout(*args)
        self._done.set()

    async def result(self) -> _Rollout:
        await self._done.wait()
        assert self._value is not None
        return self._value


def rollout_metrics(groups: Sequence[Group]) -> dict[str, float]:
    ts = [t for g in groups for t in g.trajectories]
    n = max(len(ts), 1)
    return {
        "rollout/reward_mean": sum(t.reward or 0.0 for t in ts) / n,
        "rollout/solve_rate": sum(max(g.rewards) > 0.5 for g in groups) / max(len(groups), 1),
        "rollout/response_tokens_mean": sum(len(t.response_ids) for t in ts) / n,
        "rollout/generated_tokens": sum(t.num_generated_tokens for t in ts),
        "rollout/turns_mean": sum(t.num_turns for t in ts) / n,
        "rollout/tool_calls_mean": sum(t.num_tool_calls for t in ts) / n,
        "rollout/tool_errors_mean": sum(t.num_tool_errors for t in ts) / n,
        "rollout/trajectories": len(ts),
        "rollout/finish_answer": sum(t.finish_reason == "answer" for t in ts) / n,
    }


class Trainer:
    """Runs a :class:`TrainConfig` in ``run_dir``.  Construct, then ``await run()``."""

    def __init__(self, config: TrainConfig, *, resume: bool) -> None:
        self.config = config
        self.run_dir = Path(config.run.out_dir) / config.run.name
        self.resume = resume
        self.phase_seconds = dict.fromkeys(["rollout", "reward", "update", "sync", "eval", "sft"], 0.0)
        self.learner: Any = None
        self.state = TrainState()
        self.stopped = False
        self._work: anyio.CancelScope | None = None

    def stop(self) -> None:
        """Stop at the next safe point: running rollouts and evaluations are cancelled,
        a learner step under way finishes, a checkpoint is written, and :meth:`run`
        returns a summary with ``stopped`` set (``--resume`` continues the run).
        SIGTERM calls this on rank 0, so a scheduler's preemption loses at most the
        rollout in progress."""
        self.stopped = True
        if self._work is not None:
            self._work.cancel()

    async def _stop_on_sigterm(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            task_status.started()
            async for _ in signals:
                self.stop()

    # --- set-up -------------------------------------------------------------------

    def _check_run_dir(self) -> None:
        has_checkpoint = (self.run_dir / "checkpoints").is_dir() and any((self.run_dir / "checkpoints").iterdir())
        if has_checkpoint and not self.resume:
            raise TrainError(
                f"{self.run_dir} already holds a run: pass --resume to continue it, or set run.name to start another"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.toml").write_text(to_toml(self.config))

    async def _thread(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run learner work off the event loop (one at a time: the learner is not
        thread-safe)."""
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self._learner_lock)

    async def _learner(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        """One learner operation, on every rank (see :mod:`learner_ranks`)."""
        return await self._thread(self.driver.call, operation, *args, **kwargs)

    async def run(self) -> TrainSummary | None:
        """Run every stage; returns the summary on rank 0 and None on the other ranks
        of a multi-rank learner (they follow rank 0's learner calls)."""
        import torch.distributed as dist

        from .learner import Learner, init_distributed
        from .learner_ranks import follow

        t0 = time.monotonic()
        self._learner_lock = anyio.CapacityLimiter(1)
        rank, _ = await self._thread(init_distributed)
        if rank == 0:
            prepare_model(self.config.model, self.run_dir)  # one builder; the others wait
        await self._thread(dist.barrier)
        base = prepare_model(self.config.model, self.run_dir)  # built by now: just the path
        self.learner = await self._thread(Learner, self.config.learner, base)
        if self.learner.rank != 0:
            # torchrun passes a SIGTERM to every rank: the others keep following rank 0,
            # which stops at a safe point and has them join its checkpoint, then ends.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            await self._thread(follow, self.learner)
            return None
        self._check_run_dir()
        async with anyio.create_task_group() as tg:
            await tg.start(self._stop_on_sigterm)
            summary = await self._lead(base, t0)
            tg.cancel_scope.cancel()
        return summary

    async def _lead(self, base: Path, t0: float) -> TrainSummary:
        """Rank 0: drive the learner (and the other ranks' copies) through every stage."""
        from .learner_ranks import LearnerDriver

        self.driver = LearnerDriver(self.learner)
        try:
            if self.resume:
                saved = await self._learner("load_checkpoint", self.run_dir / "checkpoints")
                if saved is not None:
                    self.state = msgspec.convert(saved, TrainState)
            weights = Path(self.state.weights_dir) if self.state.weights_dir else base
            inference = self.config.inference or InferenceConfig(model="policy")
            async with rollout_stack(
                rollout=self.config.rollout,
                inference=inference,
                sandbox=self.config.sandbox,
                model_dir=None if self.config.inference else weights,
                tokenizer_dir=base,
                local_server=self.config.server,
                log_dir=self.run_dir,
                weight_sync=self.config.weight_sync,
            ) as stack:
                if self.config.inference and self.state.weight_version:
                    await self._sync(stack, weights, self.state.weight_version)  # they may hold older weights
                stack.engine.scorer = self.scorer = _TimedScorer(stack.engine.scorer)
                with MetricsWriter(self.run_dir) as metrics, anyio.CancelScope() as self._work:
                    if self.stopped:  # asked before the work began
                        self._work.cancel()
                    for index in range(self.state.stage, len(self.config.stages)):
                        stage = self.config.stages[index]
                        if stage.kind == "sft":
                            await self._sft_stage(stack, stage, metrics)
                        else:
                            await self._rl_stage(stack, index, stage, metrics)
                        self.state.stage, self.state.step_in_stage = index + 1, 0
                    if not self.state.evals or self.state.evals[-1]["rl_step"] != self.state.rl_step:
                        await self._evaluate(stack, metrics, "final")
                if self.stopped and self.state.stage < len(self.config.stages):
                    with anyio.CancelScope(shield=True):
                        await self._checkpoint(self.state.step_in_stage)
        finally:
            await self._thread(self.driver.close)
        plots = plot_metrics(self.run_dir / "metrics.jsonl", self.run_dir / "plots")
        summary = TrainSummary(
            run_dir=str(self.run_dir),
            rl_steps=self.state.rl_step,
            wall_s=time.monotonic() - t0,
            evals=self.state.evals,
            phase_seconds=self.phase_seconds,
            plots=[str(p) for p in plots],
            stopped=self.stopped,
        )
        (self.run_dir / "summary.json").write_bytes(msgspec.json.format(msgspec.json.encode(summary)) + b"\n")
        return summary

    # --- stages -------------------------------------------------------------------

    async def _sft_stage(self, stack: RolloutStack, stage: StageConfig, metrics: MetricsWriter) -> None:
        from transformers import AutoTokenizer

        from .sft import load_chat_jsonl

        tokenizer = AutoTokenizer.from_pretrained(str(self.learner.model_path))
        seqs = load_chat_jsonl(stage.data, tokenizer, max_tokens=self.config.server.max_model_len)
        t0 = time.monotonic()
        with StepBar(stage.name, stage.steps, self.state.step_in_stage) as bar:
            for step in range(self.state.step_in_stage, stage.steps):
                with anyio.CancelScope(shield=True):  # a stop comes between steps, never inside one
                    await self._set_lr(stage, step)
                    batch = batch_for_step(seqs, stage.batch_problems, seed=self.config.run.seed, stage=self.state.stage, step=step)
                    stats = await self._learner("sft_step", batch)
                    self.state.step_in_stage = step + 1
                values = {"sft/loss": stats.loss, "sft/grad_norm": stats.grad_norm, "sft/lr": stats.lr}
                metrics.write(self.learner.global_step, values)
                bar.advance(f"loss {stats.loss:.4f}")
                await anyio.lowlevel.checkpoint()  # where a stop takes effect
        self.phase_seconds["sft"] += time.monotonic() - t0
        await self._export_and_sync(stack)
        await self._evaluate(stack, metrics, stage.name)
        await self._checkpoint(stage.steps)

    async def _rl_stage(self, stack: RolloutStack, index: int, stage: StageConfig, metrics: MetricsWriter) -> None:
        problems = load_problems(stage.data)
        if stage.reset_optimizer and self.state.step_in_stage == 0:
            await self._learner("reset_optimizer")
        rollout = msgspec.structs.replace(
            self.config.rollout,
            max_response_tokens=stage.max_response_tokens or self.config.rollout.max_response_tokens,
            max_turns=stage.max_turns or self.config.rollout.max_turns,
        )
        engine = _with_config(stack.engine, rollout)
        if stage.hard_filter_samples:
            problems = await self._hard_problems(engine, stage, problems)
        def batch(step: int) -> list[Problem]:
            return batch_for_step(problems, stage.batch_problems, seed=self.config.run.seed, stage=index, step=step)

        async with anyio.create_task_group() as tg:
            ahead: _Ahead | None = None
            for step in range(self.state.step_in_stage, stage.steps):
                if ahead is None:
                    done = await self._rollout(engine, stage, batch(step), step)
                else:
                    done = await ahead.result()
                ahead = None
                if self.config.run.max_staleness and step + 1 < stage.steps:
                    # Overlap the next rollout with this update (bounded staleness).
                    ahead = _Ahead()
                    tg.start_soon(ahead.run, self._rollout, engine, stage, batch(step + 1), step + 1)
                with anyio.CancelScope(shield=True):  # an update, its sync and its record go together
                    await self._set_lr(stage, step)
                    values = await self._update(stack, stage, done)
                    self.state.rl_step += 1
                    self.state.step_in_stage = step + 1
                    metrics.write(self.state.rl_step, {"stage": stage.name, **values})
                every = self.config.run.eval_every
                if every and self.state.rl_step % every == 0:
                    await self._evaluate(stack, metrics, stage.name)
                if (step + 1) % self.config.run.checkpoint_every == 0 or step + 1 == stage.steps:
                    with anyio.CancelScope(shield=True):
                        await self._checkpoint(step + 1)

    async def _rollout(self, engine: RolloutEngine, stage: StageConfig, batch: list[Problem], step: int) -> _Rollout:
        """Roll out one batch; GRPO-RoC downsamples each group as it completes."""
        rng = random.Random(f"{self.config.run.seed}/roc/{stage.name}/{step}")
        done = _Rollout()
        reward_before = self.scorer.seconds
        t0 = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(show_progress, engine, len(batch) * stage.n_oversample, f"{stage.name} step {step + 1}")
            async with engine.stream(batch, stage.n_oversample) as stream:
                async for group in stream:
                    done.groups.append(group)
                    decision = roc_downsample(group, stage.n_keep, rng, selection=stage.roc_selection)
                    if decision.group is not None:
                        done.kept.append(decision.group)
                    for d in decision.dropped:
                        done.dropped[d.reason] = done.dropped.get(d.reason, 0) + 1
            tg.cancel_scope.cancel()
        done.seconds = time.monotonic() - t0
        done.reward_seconds = self.scorer.seconds - reward_before
        return done

    async def _update(self, stack: RolloutStack, stage: StageConfig, done: _Rollout) -> dict[str, Any]:
        """GRPO on the kept groups, then export and sync; returns the step's metrics."""
        self._write_samples(done.groups, stage.name)
        oldest = self.state.weight_version - self.config.run.max_staleness
        fresh = [g for g in done.kept if all(t.weight_version >= oldest for t in g.trajectories)]
        values: dict[str, Any] = rollout_metrics(done.groups)
        values.update({f"roc/dropped_{k}": v for k, v in done.dropped.items()})
        values["roc/groups_kept"] = len(fresh)
        values["async/stale_groups_dropped"] = len(done.kept) - len(fresh)
        update_s = sync_s = 0.0
        if fresh:  # a batch where every group was all-right or all-wrong teaches nothing
            t1 = time.monotonic()
            stats = await self._learner("grpo_step", fresh)
            update_s = time.monotonic() - t1
            values.update({f"learner/{k}": v for k, v in msgspec.structs.asdict(stats).items()})
            sync_s = await self._export_and_sync(stack)
        timings = {"rollout": done.seconds, "reward": done.reward_seconds, "update": update_s, "sync": sync_s}
        for phase, seconds in timings.items():
            values[f"time/{phase}_s"] = seconds
            self.phase_seconds[phase] += seconds
        values["weight_version"] = self.state.weight_version
        return values

    async def _hard_problems(self, engine: RolloutEngine, stage: StageConfig, problems: list[Problem]) -> list[Problem]:
        """rStar2 stage 3: keep problems the current policy does not solve every time."""
        if stage.name not in self.state.hard_problems:
            solved_all = set()
            groups = await engine.run(problems, stage.hard_filter_samples)
            for g in groups:
                if min(g.rewards) > 0.5:
                    solved_all.add(g.problem.id)
            self.state.hard_problems[stage.name] = [p.id for p in problems if p.id not in solved_all]
        keep = set(self.state.hard_problems[stage.name])
        hard = [p for p in problems if p.id in keep]
        if not hard:
            raise TrainError(f"stages[{stage.name}]: the policy solves every problem of {stage.data}; nothing is hard")
        return hard

    # --- weights, evaluation, checkpoints --------------------------------------------

    async def _export_and_sync(self, stack: RolloutStack) -> float:
        t0 = time.monotonic()
        version = self.state.weight_version + 1
        out = self.run_dir / "weights" / f"v{version:06d}"
        # On disk whatever the transport: a broadcast sends this directory's tensors,
        # and --resume, a restarted server or one the broadcast failed on load it.
        await self._learner("export", out)
        await self._sync(stack, out, version)
        previous = self.state.weights_dir
        self.state.weight_version, self.state.weights_dir = version, str(out)
        if previous and Path(previous).parent == out.parent:
            shutil.rmtree(previous, ignore_errors=True)  # the servers hold the new ones now
        return time.monotonic() - t0

    async def _sync(self, stack: RolloutStack, weights: Path, version: int) -> None:
        if stack.sync is None:
            raise TrainError("training needs token mode (inference.mode = \"tokens\"): chat endpoints cannot load weights")
        await stack.sync.sync(weights, version)
        if stack.fleet is not None:
            stack.fleet.set_model(str(weights))  # a restarted server comes back with these

    async def _evaluate(self, stack: RolloutStack, metrics: MetricsWriter, label: str) -> None:
        section = self.config.eval
        if not section.data:
            return
        t0 = time.monotonic()
        rollout = msgspec.structs.replace(self.config.rollout, sampling=section.sampling)
        engine = _with_config(stack.engine, rollout)
        record: dict[str, Any] = {"rl_step": self.state.rl_step, "stage": label}
        for name in section.data:
            problems = load_problems(name, limit=section.limit)
            out = self.run_dir / "eval" / f"step-{self.state.rl_step:06d}-{label}" / Path(name).stem
            summary = await evaluate(engine, Path(name).stem, problems, n=section.n, out_dir=out)
            record[Path(name).stem] = summary.avg_at_n
        scores = [v for k, v in record.items() if k not in ("rl_step", "stage")]
        record["accuracy"] = sum(scores) / len(scores)
        self.state.evals.append(record)
        metrics.write(self.state.rl_step, {f"eval/{k}": v for k, v in record.items() if k not in ("rl_step", "stage")})
        self.phase_seconds["eval"] += time.monotonic() - t0

    async def _checkpoint(self, step_in_stage: int) -> None:
        self.state.step_in_stage = step_in_stage
        state = msgspec.to_builtins(self.state)
        root = self.run_dir / "checkpoints"
        try:
            await self._learner("save_checkpoint", root, state=state)
        except OSError as exc:  # e.g. a full disk: the checkpoint is atomic, so nothing older is lost
            from .checkpoint import latest_checkpoint  # imports torch, which only the learner needs

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
        await self._learner("set_peak_lr", peak * decay)

    def _write_samples(self, groups: Sequence[Group], stage: str) -> None:
        k = self.config.run.samples_per_step
        if not k:
            return
        picked: list[Trajectory] = [g.trajectories[0] for g in groups[:k]]
        with (self.run_dir / "samples.jsonl").open("ab") as f:
            for t in picked:
                record = {
                    "rl_step": self.state.rl_step + 1, "stage": stage, "problem_id": t.problem_id,
                    "reward": t.reward, "finish_reason": t.finish_reason, "turns": t.num_turns,
                    "tool_calls": t.num_tool_calls, "weight_version": t.weight_version, "response": t.response_text,
                }  # fmt: skip
                f.write(msgspec.json.encode(record) + b"\n")


def _with_config(engine: RolloutEngine, config: Any) -> RolloutEngine:
    """A second engine over the same servers, sandbox and grader, with other limits."""
    return RolloutEngine(
        backend=engine.backend, sandbox=engine.sandbox, config=config, tokenizer=engine.tokenizer, scorer=engine.scorer
    )
