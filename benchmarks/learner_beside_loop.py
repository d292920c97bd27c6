"""The learner's step in a worker thread beside a busy event loop, by GIL switch interval.

The trainer runs the learner in a worker thread (``anyio.to_thread``) while the
rollouts' event loop runs in the main thread: in streaming mode, and in on-policy
mode with a rollout ahead, both are busy at once.  Torch releases the GIL inside each
op, and the loop takes it; Python lets the learner have it back only after the switch
interval (5 ms by default), so a model of many small ops waits that long per op.  This
measures a tiny Qwen2's training step (2 layers, hidden 128, 512 tokens, one torch
thread: the CPU demo's learner) alone, then beside a loop that is always busy with
Python work (the worst case: ~10 ms of JSON encoding per iteration), at several switch
intervals, with the loop's iterations per second beside it (the price on the loop's
side).  The trainer sets ``recipe._trainer.SWITCH_INTERVAL_S`` (0.1 ms) while it runs.

Measured on the 2-core development machine with nothing else running (this code,
before it moved here): step 0.056 s alone; beside the busy loop 5.97 s at 5 ms (7.5 s
in an earlier run), 0.90 s at 1 ms, 0.31 s at 0.2 ms, 0.16 s at 0.1 ms; the loop's
93.7 iterations/s alone, 97.3 at 5 ms, 90.1 at 0.1 ms.  With the CPU demo's SFT
busy on the other core the convoy mostly goes (the OS deschedules the loop as often
as it holds the GIL): 0.163 s at 5 ms, 0.138 s at 0.1 ms, but the loop then does
75.6 and 43.3 iterations/s.

Usage: ``python benchmarks/learner_beside_loop.py``
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Callable

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

INTERVALS = (0.005, 0.001, 0.0005, 0.0002, 0.0001)


def make_step() -> Callable[..., float]:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    model = Qwen2ForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 512, (1, 512))

    def steps(n: int = 20) -> float:
        t = time.perf_counter()
        for _ in range(n):
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
        return (time.perf_counter() - t) / n

    return steps


async def busy(stop: threading.Event, count: list[int]) -> None:
    while not stop.is_set():
        for _ in range(200):
            json.dumps(list(range(300)))
        count[0] += 1
        await asyncio.sleep(0)


def beside_loop(steps: Callable[..., float], interval: float) -> dict:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    stop, count, out = threading.Event(), [0], {}

    async def main() -> None:
        task = asyncio.create_task(busy(stop, count))
        out["step_s"] = await asyncio.to_thread(steps)
        stop.set()
        await task

    t0 = time.perf_counter()
    try:
        asyncio.run(main())
    finally:
        sys.setswitchinterval(previous)
    return {"step_s": round(out["step_s"], 4), "loop_iters_per_s": round(count[0] / (time.perf_counter() - t0), 1)}


def loop_alone() -> float:
    stop, count = threading.Event(), [0]

    async def main() -> None:
        task = asyncio.create_task(busy(stop, count))
        await asyncio.sleep(2)
        stop.set()
        await task

    t0 = time.perf_counter()
    asyncio.run(main())
    return count[0] / (time.perf_counter() - t0)


def main() -> None:
    torch.set_num_threads(1)
    steps = make_step()
    steps(3)  # warm-up
    alone = steps()
    by = {str(i): beside_loop(steps, i) for i in INTERVALS}
    print(json.dumps({
        "benchmark": "learner_beside_loop",
        "step_s_alone": round(alone, 4),
        "loop_iters_per_s_alone": round(loop_alone(), 1),
        "beside_busy_loop": by,
        "slowdown_default": round(by["0.005"]["step_s"] / alone, 1),
        "slowdown_trainer": round(by["0.0001"]["step_s"] / alone, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
