"""Streaming benchmark: 20 RL steps of rStar2's stage 1 on a simulated fleet, trainer policies side by side.

benchmarks/dispatch.py's discrete-event fleet (its docstring has the calibration:
Qwen3-14B on H100s, vLLM's scheduler, prefix cache and preemption, the dispatcher
polling ``/metrics``, rStar2's turn, tool and response-length shapes), run for many
steps with a trainer around it, on 16 servers.  Each step is rStar2's stage 1: 128
problems x 32 samples, GRPO-RoC keeps 16 of each group (uniformly here: lengths do
not depend on rewards in the model); a problem's solve rate is Beta(0.5, 0.5)
(assumed), so ~20% of groups have equal rewards and are dropped.  Every policy sees
the same problems, trajectories and rewards (seeded per chunk of 128 problems).

The learner and the sync, modelled:

- An update takes its trained tokens x 8 x 14.8e9 FLOPs (6N forward and backward,
  2N for the old log-probs) on 32 H100s of its own at 40% MFU (assumed):
  5.1e15 FLOP/s, ~84 s for 128 kept groups (a batch keeps ~80% of them).
- A sync pauses the fleet for the load of 29.6 GB of bf16 weights at
  benchmarks/weight_sync.py's measured disk load (0.406 s per 1000 MiB here),
  plus its measured pause, flush, version and resume round trips: 11.5 s; then the
  prefix caches are flushed (their KV is of the old weights).

The policies (the trainer's code paths, rstar2_async/recipe):

- ``sync_static``, ``sync_ours``: on-policy (``run.max_staleness = 0``): a step's
  rollout, update and sync in turn; the fleet dispatched round-robin, or by our
  KV-budget dispatcher and the pool's retry order.
- ``one_step_overlap``: today's ``run.max_staleness = 1`` on-policy mode: step
  k + 1's rollout starts when step k's update does, and the sync waits for the
  turns in flight (``pause_mode = "wait"``).
- ``streaming_s1``, ``streaming_s2``: ``run.mode = "streaming"`` with
  ``max_staleness`` 1 and 2, as recipe/_streaming.py runs it: at most
  (S + 1) x 128 groups started ahead of the learner (in flight, finished but
  untrained, or in the update under way, whose room comes back after its sync);
  each batch is the next 128 positions of the stream, once all are finished, and
  trains the groups RoC kept of them (the on-policy step's data); a sync aborts the
  turns in flight, which resume from their tokens on the new weights.
- ``streaming_s1_keep_kv``: streaming_s1 with a sync the trainer does not do:
  vLLM's ``pause_generation(mode="keep", clear_cache=False)`` (vLLM 0.32:
  docs.vllm.ai/en/v0.32.0/training/async_rl, ``EngineCore.pause_scheduler``): the
  turns in flight freeze for the same pause, then go on with their KV of the old
  weights, and the prefix caches are kept.  PipelineRL (arXiv 2509.19128, its
  Figure 7) measured the off-policyness this adds as negligible, and NeMo-RL maps
  its ``recompute_kv_cache_after_weight_updates`` to ``clear_cache`` (NVIDIA-NeMo/RL
  PR 3839).  A group's staleness still counts from its oldest token, so the
  bound and its proof are unchanged; what changes is that tokens after a sync
  attend to keys and values of the previous weights (the sampler's logprobs,
  which the loss's importance weight uses, are of exactly that).  The trainer's
  ``weight_sync.pause_mode = "keep"`` freezes turns with ``clear_cache`` left true:
  vLLM computes their KV again on the new weights, the same work as the abort's
  resume in this model (streaming_s1's figures), less the round trip of each turn.
  Keeping the KV as modelled here would also keep the prefix caches' blocks of
  older weights, which no flush can reach while turns hold them.

Diagnostics, run only when named with ``--policies``: ``streaming_s1_no_sync``
(the fleet alone, never paused: every group is too stale, but its utilization is
the most this fleet and dispatcher reach with any sync), and
``streaming_s1_expected_keep`` (admission counting the groups in flight by the
keep rate observed so far: unsound, see recipe/_streaming.py; here its extra groups
wait in the engine's queue, ``max_in_flight``, so they cost nothing and gain nothing).

Figures per policy (medians over the seeds; steady state is from the first batch
taken to the last): ``trained_tokens_per_s`` (the kept samples' prompts, responses
and tool outputs per second), ``fleet_utilization`` (the work bound of the
trajectories finished in the window, dispatch.py's ``lower_bound``, over the
window: 1.0 is a fleet always at its most efficient), ``kv_fill`` and
``servers_idle_share`` (sampled each second), ``learner_idle_share``, the staleness
histogram of trained groups (mean count per run), and ``groups_wasted`` (generated,
kept by RoC, then too stale to train: the rule makes it 0; the largest over the
seeds).  Where the fleet's time goes, as shares of the servers' time in the window
(:meth:`Trainer.fleet_time`): ``time_work`` (weight reads as if every step
attended to a full cache, and attention: what the bound charges), ``time_below_full_cache``,
``time_prefill_bound`` (steps whose prefill outlasts the weight read) and
``time_idle`` (the pause); ``bound_prompt_credit`` is what the bound takes off for a
problem's 32 samples sharing one copy of its prompt, which they do only while they
run on one server at once: utilization ~ time_work - bound_prompt_credit.
Top level: streaming_s1's ``speedup_vs_sync_static`` and
``speedup_vs_sync_ours`` (medians of the per-seed ratios of trained tokens per
second), ``fleet_utilization`` and ``groups_wasted``.

Measured (8 seeds, 20 steps, every policy; ``python benchmarks/streaming.py``,
2026-12-02), trained tokens per second over synchronous static: sync_ours 1.214x,
one_step_overlap 1.262x, streaming_s1 **1.602x** (**1.321x** sync_ours),
streaming_s2 1.603x, streaming_s1_keep_kv 1.685x; fleet utilization 0.506, 0.614,
0.637, **0.811**, 0.812, 0.852; learner idle 87%, 84%, 84%, 79%, 79%, 78%; 0 groups
wasted in every policy; streaming_s1 trains 9% of its groups at staleness 0 and 91%
at 1.  Every policy now trains the same batches (a streaming batch is a step's 128
problems, as on-policy; the rule before took 128 *kept* groups a batch, ~25% more
per update and sync, and measured 1.635x, 1.349x and 0.827 then).  The pool's order
matters for streaming: ``streaming_s1_budget_order`` (on-policy's retry order,
largest remaining budget first, so new groups' first turns overtake the turns of the
group the learner waits for) reaches 1.458x and 0.697 of the bound.  S = 2 gains
nothing over S = 1: the fleet is the bottleneck at either bound.

Where the utilization goes (under the rule before, 4 seeds, 10 steps, ``--repeats 4
--steps 10``, all policies and the no-sync diagnostic: streaming_s1 1.640x static,
1.351x ours, 0.827 of the bound, 0 wasted; under today's rule the shares are alike:
pause 3.6%, prefill-bound 7.0%, below full cache 3.2%, prompt credit 5.0%).  Of
streaming_s1's server time, 2.9% is the pause (time_idle: 11.5 s of each ~396 s
step), 6.0% steps bound by prefill, 3.2% weight reads below a full cache, and the
bound credits 5.2% for shared prompts: 0.879 - 0.052 = 0.827.  Without any sync
(``streaming_s1_no_sync``) the same fleet reaches 0.886 (prefill 2.6%, below full
cache 3.3%, prompt credit 5.5%): no sync mechanism can take streaming_s1 to 0.9
here.  The syncs take 6.3% of the server time: the pause 2.9, and 3.4 recomputing
what the abort and the flush threw away (73M tokens prefilled in 10 steps against
38M).
``streaming_s1_keep_kv`` keeps the KV and recomputes nothing: 0.859 of the bound,
1.701x static, 0 wasted, every group at staleness 0 or 1 as in streaming_s1; with a 1 s pause (``--pause-s
1``, 1 seed, 4 steps: a what-if, not a measured load) it reached 0.882 against
streaming_s1's 0.849.  What the fleet loses without syncs is the dispatcher's: its
10% headroom keeps the caches ~0.85 full (less headroom fills them more but evicts
the prefixes of sessions between turns: 0.05 measured 0.864, 0.02 0.840, without
syncs, 1 seed, 5 steps), and a problem's 32 samples start as the engine has room and land
wherever the budget is, so they rarely hold one copy of the prompt (seeding each
first turn's affinity with its problem's first server, a what-if on the
dispatcher's sessions: 0.830 against 0.828, credit unchanged; 1 seed, 4 steps).
Rolling syncs would not help in this model: each server still pauses for its load
and recomputes its contexts, and the learner does not wait for the fleet (idle 79%).
Target: utilization 0.9 of the bound: not met (0.811; 0.852 with ``keep``).

The model is the shipped package ``fleetsim``: ``_setup.py`` (the setup, the
policies, the problem stream), ``_stream_fleet.py`` and ``_waiting.py`` (the
fleet), ``_trainer.py`` (the trainer, the learner, the figures), on
dispatch.py's ``_model.py`` and ``_dispatch.py``.

Usage: ``python benchmarks/streaming.py [--repeats 8] [--steps 20] [--jobs 2]`` (the
simulation is deterministic: load changes its wall time, never its figures).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fleetsim, backends

from fleetsim import DIAGNOSTICS, PAUSE_S, POLICIES, Setup, Trainer  # noqa: E402


def simulate(task: tuple[Setup, str, int]) -> tuple[str, int, dict]:
    setup, name, seed = task
    wall, cpu = time.perf_counter(), time.process_time()
    row = Trainer(setup, {**POLICIES, **DIAGNOSTICS}[name], seed).run()
    row["sim_wall_s"], row["sim_cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
    return name, seed, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--steps", type=int, default=Setup.steps)
    parser.add_argument("--servers", type=int, default=Setup.servers)
    parser.add_argument("--seed", type=int, default=0, help="the first seed; the repeats use seed, seed + 1, ...")
    parser.add_argument("--max-in-flight", type=int, default=Setup.max_in_flight)
    parser.add_argument("--overlap-pause", choices=["wait", "abort"], default=Setup.overlap_pause)
    parser.add_argument("--pause-s", type=float, default=PAUSE_S, help="a sync's pause (default: measured, scaled)")
    parser.add_argument("--policies", nargs="+", choices=[*POLICIES, *DIAGNOSTICS], default=list(POLICIES))
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="simulations run at once")
    args = parser.parse_args()
    setup = Setup(steps=args.steps, servers=args.servers, max_in_flight=args.max_in_flight,
                  overlap_pause=args.overlap_pause, pause_s=args.pause_s)  # fmt: skip
    tasks = [(setup, name, seed) for seed in range(args.seed, args.seed + args.repeats) for name in args.policies]
    rows: dict[str, dict[int, dict]] = {name: {} for name in args.policies}
    wall, cpu = time.perf_counter(), time.process_time()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for name, seed, row in pool.imap_unordered(simulate, tasks):
            rows[name][seed] = row
            print(json.dumps({"seed": seed, "policy": name, **row}), file=sys.stderr)
    ordered = {name: [by_seed[k] for k in sorted(by_seed)] for name, by_seed in rows.items()}
    cpu = time.process_time() - cpu + sum(r["sim_cpu_s"] for rs in ordered.values() for r in rs)  # parent + workers
    print(json.dumps(summary(ordered, args, setup, time.perf_counter() - wall, cpu)))


def summary(rows: dict[str, list[dict]], args: argparse.Namespace, setup: Setup, wall: float, cpu: float) -> dict:
    med = lambda name, key: statistics.median(r[key] for r in rows[name])
    per_policy = {}
    for name, rs in rows.items():
        hist: Counter[int] = Counter()
        for r in rs:
            hist.update(r["staleness"])
        per_policy[name] = {
            **{k: round(med(name, k), 3) for k in rs[0] if k != "staleness"},
            "staleness_histogram": {str(k): round(v / len(rs), 1) for k, v in sorted(hist.items())},
            "groups_wasted_max": max(r["groups_wasted"] for r in rs),
        }

    def speedup(name: str, base: str) -> float | None:
        if name not in rows or base not in rows:
            return None
        return round(statistics.median(a["trained_tokens_per_s"] / b["trained_tokens_per_s"] for a, b in zip(rows[name], rows[base])), 3)

    head = "streaming_s1"
    return {
        "benchmark": "streaming",
        "servers": setup.servers,
        "steps": setup.steps,
        "repeats": args.repeats,
        "speedup_vs_sync_static": speedup(head, "sync_static"),
        "speedup_vs_sync_ours": speedup(head, "sync_ours"),
        "fleet_utilization": per_policy.get(head, {}).get("fleet_utilization"),
        "groups_wasted": per_policy.get(head, {}).get("groups_wasted_max"),
        "speedups_vs_sync_static": {n: speedup(n, "sync_static") for n in rows},
        "policies": per_policy,
        "pause_s": round(setup.pause_s, 2),
        "max_in_flight": setup.max_in_flight,
        "overlap_pause": setup.overlap_pause,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    main()
