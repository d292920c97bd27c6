"""Dispatch benchmark: our KV-budget dispatcher against static round-robin, simulated.

A discrete-event simulation of a rollout step of rStar2-Agent's stage 1 on a
fleet of 8 vLLM servers, each one Qwen3-14B on one H100-80GB.  Both policies
run the same workload on the same server model in the same run.

Calibration (each figure, and where it comes from):

- Model: Qwen3-14B (its model card: 40 layers, grouped-query attention with
  40 query and 8 KV heads of dim 128, 14.8e9 parameters), bf16.  KV per token: 40 x 8 x 128 x (K, V) x 2 bytes =
  160 KiB.  Weights: 29.6 GB.
- GPU: H100-80GB SXM, 3.35 TB/s HBM3 and 989 TFLOP/s dense bf16 (NVIDIA's
  datasheet); taken at 3.0 TB/s (~90%, what memory-bound kernels reach) and
  495 TFLOP/s (50% MFU, good for a 14B model's GEMMs).
- KV capacity: vLLM's default ``gpu_memory_utilization`` 0.9 x 80 GiB = 77.3 GB,
  less 29.6 GB of weights and ~3 GB of activations and CUDA graphs, is 44.7 GB
  = ~273K tokens: 270,000 per server.
- A step of ``b`` running sequences holding ``C`` tokens of context, prefilling
  ``n`` tokens, takes ``max(t_weights, (b + n) * t_compute) + C * t_kv``: every
  step reads all weights (29.6 GB at 3 TB/s = 9.9 ms, memory bound below
  ~165 sequences), its GEMMs cost 2 x 14.8e9 FLOPs per token (60 us at 495
  TFLOP/s: prefill at ~16.7K tokens/s), and attention reads the KV of every
  running sequence (160 KiB per token at 3 TB/s = 55 ns).  So decode speed
  falls with the batch's tokens, not only its requests: 64 sequences of 3.8K
  tokens step in ~23 ms (~2.8K tokens/s per server).  Not modelled: attention
  FLOPs, sampling and scheduling overheads (they would slow both policies).
- Each server is vLLM 0.32's V1 scheduler (vllm/v1/core/sched/scheduler.py):
  a FCFS waiting queue; up to ``max_num_seqs`` running (256, the OpenAI
  server's default on an A100 or a GPU under 70 GB in engine/arg_utils.py; an
  H100 gets 1,024; neither binds here); a waiting request is admitted when its whole context fits the blocks
  that running requests do not hold, and none in a step that preempted; when a
  running request finds no block for its next token, the newest running one is
  preempted, its KV freed and recomputed later from the front of the queue
  (recompute mode); freed blocks keep their prefix-cache hash and are evicted
  least recently freed first, a request's tail first (single_type_kv_cache_manager
  frees blocks in reverse); a request reuses what is left of its prefix.
  ``/metrics``' ``kv_cache_usage_perc`` counts only blocks held by running
  requests (block_pool.get_usage), which is what the dispatcher sees, polled
  once a second as the pool does.  A step charges all of its prefill (vLLM's
  chunked prefill spreads prompts over 8,192-token steps: the same total).
- Workload, rStar2-Agent stage 1 (arXiv 2508.20722 and its recipe,
  microsoft/rStar ``rstar2_agent_trainer.yaml`` and the Qwen3-14B run script:
  ``max_assistant_turns`` 5, ``max_response_length`` 8192, n = 32): 2,048
  trajectories (64 problems x 32, issue #4); prompts of 250-750 tokens (a
  problem and the tool-format system prompt; assumed); 1-5 turns (uniform:
  assumed), each lognormal with mean 1.3K tokens (median 790) within the 8K
  response budget, so a trajectory generates 3.6K tokens on average (median
  3.0K) and ~10% reach the budget, the several-thousand-token responses of
  rStar2's stage 1 with its clipped tail (the shape is our assumption); between
  turns a tool call of lognormal latency with rStar2's 0.3 s mean, cut at the
  recipe's 4 s timeout, whose response (30-300 tokens) is appended.
  By default every trajectory has a prompt of its own (the issue's workload);
  ``--group 32``: the 32 samples of a problem share its prompt, which a server
  holds once for all of them that it runs and prefills once while any of them
  is running or cached (vLLM's prefix cache); static's trajectory ``i`` is
  sample ``i mod 32`` of problem ``i // 32``.  The bound then lets a step hold
  each problem's prompt once.

Static against this: 256 trajectories per server, whose contexts grow to ~4.4K
tokens each, over-subscribe a 270K-token cache about 4x.  Static sends them all
at once and vLLM preempts (~2,100 times a run) and recomputes, and most prefixes
are evicted during the tool calls: it prefills ~14M tokens where 1.7M would do.

- ``static``: trajectory ``i`` goes to server ``i mod 8`` for all its turns.
- ``ours``: :class:`backends.Dispatcher` with the pool's settings
  (budget policy, expected reservations, 10% headroom, holds for 2 reports):
  see its module docstring.  Turns it has no room for wait, and every waiting
  turn tries again on each release or report, largest remaining budget first
  (then oldest), as the pool's waiters do.  (The budget here counts generated tokens, the agent loop's also
  tool responses: the same order in this workload.)  A trajectory's end is
  signalled, as the agent loop's ``end_session`` does: its hold goes at once.
  ``--order fifo``: waiting turns retry oldest first; ``--order oracle``: the
  trajectory with the most tokens left to generate first (clairvoyant).
  ``--hold-reports 0`` turns holds off; ``--reserve N`` uses the legacy
  reservation context + min(remaining, N).

Lower bound (:func:`lower_bound`): the larger of the work bound (every token's
GEMMs and every step's weight read, with as few steps as the cache and
``max_num_seqs`` allow, plus the attention reads that any schedule does, each
prompt and tool response prefilled once, spread evenly) and the critical path
(the slowest trajectory alone).  The JSON line reports makespans and bounds
(medians over ``--repeats`` seeds), ``speedup_vs_static``,
``ratio_to_lower_bound`` (and static's), ``overflows`` (ours, preemptions; the
median, and the most in any seed) and ``static_overflows``, the tokens each
policy prefilled and the affinity hit rate.

Results (``--repeats 3``, medians; 25 s of CPU): static 437 s, ours 342 s, lower
bound 278 s: 1.28x static (target 1.3: not met; 1.30x over 8 seeds, 1.299),
1.24x the bound (target 1.15: not met; 1.24x over 8 seeds), no preemption in
any seed (static: ~2,150); prefilled tokens 2.8M against static's 14.0M.  Over
8 seeds the makespan went from 348 s (1.27x static, 1.27x the bound) to 347 s
by ending holds with the trajectory (``--order fifo``: 1.27x, 1.26x) and to 340 s by
the order of waiting turns.  Without holds (``--hold-reports 0``) ours is 1.11x
static and prefills 12.1M: most later turns land on another server.

Shared prompts (``--group 32``, 8 seeds): static 410 s, ours 330 s, bound
260 s: 1.24x static, 1.27x the bound, no preemption.  Static gains most (8%):
each of its servers runs all 64 problems, 4 samples each, in a cache it
over-subscribes 4x, and a shared prompt frees a quarter of it; ours gains 3%.
Steering a problem's samples to the server that holds its prompt (and
reserving only the rest) measured worse (seed 0: 346 s against 341 s without;
with a 5% affinity slack 342 s), and is not in the dispatcher.

Where ours loses to the bound, which has every step of every server run a full
cache to the end: decode steps here are memory bound (~64 sequences, each step
pays the 9.9 ms weight read), so the step count is the attended tokens over the
fill.  Ours fills ~0.9 of each cache in steady state (the headroom is the growth
margin that keeps vLLM from preempting; static fills 0.99 and preempts), starts
low while contexts are short (0.3 to 0.9 over ~30 s), and ends in a ~75 s tail
as the last long trajectories finish on an emptying fleet.  At the start 1,264
trajectories (158 a server) run their first turns at once; at ~30-40 s their
contexts outgrow the caches, and the later turns that find no room lose their
hold and wait behind first turns (they have the larger budget) until those run
out at ~160 s, then recompute (~1.1M tokens); trajectories wait ~65 s between
turns on average, and the long ones among them make the tail.  Admitting fewer
first turns is worse, though: with each reserving 1.5x the expected turn ours
is 1.25x static, with 2x and 3x 1.23x and 1.20x (oldest first); 0.75x measures
like 1x, 0.5x 1.24x (oldest first).  Tried, and no better within +-2% (3
seeds unless stated): headroom 0.03-0.2 (0.08 and 0.12 over 8 seeds: 1.30x
and 1.31x static, 1.23x and 1.24x the bound), hold headroom 0.02-0.06, holds
of 1-10 reports (1 is worse; 4 and 10 with trajectory ends signalled: within
1.5% of 2), a margin for first turns, moving held turns to balance servers,
priority to turns of sessions under way on any server or their last one, the
most generated first, a first guess of 256-2,048 tokens per turn.  Worse:
later turns first (1.21x static against 1.25x oldest first: new trajectories
start late and make the tail), fewest turns done first (1.26x), shortest
context first (1.26x), holds kept while their turn waits (1.05x: servers stall
on holds whose turns cannot fit).  An oracle starting the longest trajectories
first (oldest first after that) reaches 1.28x static and 1.25x the bound, and
preempts (up to 4 times a run).  A clairvoyant order of every waiting turn
(``--order oracle``: the trajectory with the most tokens left first) reaches
1.34x static and 1.19x the bound over 8 seeds, without preemption: ordering
alone, even knowing every length, does not reach 1.15 in this server model.
Seed 0 with it: 335 s against a bound of 279 s, of which steps below a full
cache add 25 s a server (the ramp, the headroom, the drain), prefill charged in
whole steps as vLLM does (compute bound, ~24 s; the bound counts prompts once
and hides them under weight reads) and idle servers 7 s.  So the speedup target
looks reachable here only with some knowledge of lengths (over 8 seeds ours is
1.299x), and the ratio target not at all; the bound itself stays a true bound.

The model (calibration, workload, servers, lower bound) is in ``fleetsim._model``,
the simulation in ``fleetsim._dispatch``.

Usage: ``python benchmarks/dispatch.py [--repeats 3] [--capacity 270000] [--hold-reports 2] [--reserve N] [--order budget|fifo|oracle]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fleetsim, backends

from fleetsim import Params, Sim, lower_bound, workload  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trajectories", type=int, default=Params.trajectories)
    parser.add_argument("--group", type=int, default=Params.group, help="samples per problem, sharing its prompt (rStar2: 32)")
    parser.add_argument("--capacity", type=int, default=Params.capacity)
    parser.add_argument("--reserve", type=int, default=Params.reserve, help="legacy reservation cap (default: expected)")
    parser.add_argument("--headroom", type=float, default=Params.headroom)
    parser.add_argument("--hold-reports", type=int, default=Params.hold_reports, help="0: no holds")
    parser.add_argument("--order", choices=["budget", "fifo", "oracle"], default=Params.order,
                        help="waiting turns retry largest remaining budget first (the pool's), oldest first, "
                             "or most tokens left first (clairvoyant)")
    args = parser.parse_args()
    p = Params(
        trajectories=args.trajectories,
        group=args.group,
        capacity=args.capacity,
        reserve=args.reserve,
        headroom=args.headroom,
        hold_reports=args.hold_reports,
        order=args.order,
    )
    rows = []
    for seed in range(args.repeats):
        trajs_a = workload(p, random.Random(seed))
        trajs_b = workload(p, random.Random(seed))
        t0 = time.perf_counter()
        static = Sim(p, trajs_a, "static")
        static_makespan = static.run()
        ours = Sim(p, trajs_b, "ours")
        ours_makespan = ours.run()
        stats = ours.dispatcher.statistics()  # type: ignore[union-attr]
        work, critical = lower_bound(p, trajs_a)
        rows.append({
            "seed": seed,
            "total_tokens": sum(sum(t.turns) for t in trajs_a),
            "static_makespan_s": static_makespan,
            "ours_makespan_s": ours_makespan,
            "lower_bound_s": max(work, critical),
            "lower_bound_work_s": work,
            "lower_bound_critical_path_s": critical,
            "overflows": ours.overflows,
            "static_overflows": static.overflows,
            "prefilled": ours.prefilled,
            "static_prefilled": static.prefilled,
            "affinity_hits": stats.affinity_hits,
            "affinity_moves": stats.affinity_moves,
            "sim_wall_s": time.perf_counter() - t0,
        })
        print(json.dumps(rows[-1]), file=sys.stderr)
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    result = {
        "benchmark": "dispatch",
        "servers": p.servers,
        "trajectories": p.trajectories,
        "repeats": args.repeats,
        "static_makespan_s": round(med("static_makespan_s"), 2),
        "ours_makespan_s": round(med("ours_makespan_s"), 2),
        "lower_bound_s": round(med("lower_bound_s"), 2),
        "lower_bound_work_s": round(med("lower_bound_work_s"), 2),
        "lower_bound_critical_path_s": round(med("lower_bound_critical_path_s"), 2),
        "speedup_vs_static": round(statistics.median(r["static_makespan_s"] / r["ours_makespan_s"] for r in rows), 3),
        "ratio_to_lower_bound": round(statistics.median(r["ours_makespan_s"] / r["lower_bound_s"] for r in rows), 3),
        "static_ratio_to_lower_bound": round(
            statistics.median(r["static_makespan_s"] / r["lower_bound_s"] for r in rows), 3
        ),
        "overflows": int(med("overflows")),
        "overflows_max": max(r["overflows"] for r in rows),
        "static_overflows": int(med("static_overflows")),
        "prefill_tokens": int(med("prefilled")),
        "static_prefill_tokens": int(med("static_prefilled")),
        "affinity_hit_rate": round(med("affinity_hits") / max(1, med("affinity_hits") + med("affinity_moves")), 3),
        "reservation": "expected" if p.reserve is None else f"context+min(remaining,{p.reserve})",
        "hold_reports": p.hold_reports,
        "order": p.order,
        "capacity": p.capacity,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
