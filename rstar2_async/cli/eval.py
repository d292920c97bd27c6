"""Evaluate a model with tools on math problem sets: avg@n, pass@n, maj@n.

Either a model directory (a checkpoint: a vLLM server is started for it) or any
OpenAI-compatible endpoint.  Sampling is always explicit: --temperature and --top-p
are required.  Every sample is kept in OUT/<dataset>/samples.jsonl; running the same
command again resumes without redoing finished samples.

Examples:
  rstar2 eval --model runs/demo/final --data aime24 --n 4 --temperature 0.6 --top-p 0.95
  rstar2 eval --model DIR --engine transformers --data DATA.jsonl --n 1 --temperature 0 --top-p 1  (no server)
  OPENAI_API_KEY=... rstar2 eval --endpoint https://api.example.com/v1 --served-model m \\
      --data math500 --limit 50 --n 1 --temperature 0 --top-p 1
  rstar2 eval --endpoint http://127.0.0.1:8000/v1 --served-model m --tokenizer DIR ...  (token mode)
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from rstar2_async.config import EvalConfig

HELP = "evaluate a checkpoint or an OpenAI-compatible endpoint on math sets (avg@n, pass@n, maj@n)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path, help="model directory (HF layout); a local vLLM server is started")
    source.add_argument("--endpoint", help="base URL of an OpenAI-compatible server, ending in /v1")
    p.add_argument("--served-model", default=None, help="model name sent in requests (endpoint runs; required there)")
    p.add_argument(
        "--engine", choices=("vllm", "sglang", "transformers"), default=None,
        help="how --model is served: vLLM or SGLang servers, or transformers in this process "
        "(slow; for small models and quick checks); default: server.engine (vllm)",
    )  # fmt: skip
    p.add_argument("--tokenizer", type=Path, help="tokenizer dir for token mode against an endpoint (exact token ids)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable with the API key")
    p.add_argument("--data", action="append", required=True, help="data set name in ../shared/data or a JSONL path; repeatable")
    p.add_argument("--limit", type=int, default=None, help="first N problems of each set")
    p.add_argument("--n", type=int, default=1, help="samples per problem (default 1)")
    p.add_argument("--temperature", type=float, required=True, help="sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, required=True, help="nucleus sampling mass")
    p.add_argument("--top-k", type=int, default=-1, help="top-k (-1: off)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed base")
    p.add_argument("--max-turns", type=int, default=None, help="override rollout.max_turns")
    p.add_argument("--max-response-tokens", type=int, default=None, help="override rollout.max_response_tokens")
    p.add_argument(
        "--config", type=Path,
        help="TOML with [rollout], [inference], [server], [pool], [sandbox], [reward], [data] sections (all optional)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="output directory (default runs/eval/<model>)")
    p.add_argument(
        "--grading", choices=("strict", "lenient"), default=None,
        help="strict: rStar2's boxed answer only; lenient: also an answer written without a box "
        "(default: reward.grading, else lenient for a chat endpoint, strict otherwise)",
    )  # fmt: skip


def _resolve(args: argparse.Namespace) -> EvalConfig:
    from rstar2_async.config import EvalConfig, convert, load_toml

    config = load_toml(args.config, EvalConfig) if args.config else EvalConfig()
    overrides: dict = {"rollout": {"sampling": {}}, "inference": {}, "server": {}, "reward": {}}
    if args.engine is not None:
        if not args.model:
            raise SystemExit("rstar2 eval: --engine goes with --model (an endpoint is already served)")
        overrides["server"]["engine"] = args.engine
    sampling = overrides["rollout"]["sampling"]
    sampling.update(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    if args.max_turns is not None:
        overrides["rollout"]["max_turns"] = args.max_turns
    if args.max_response_tokens is not None:
        overrides["rollout"]["max_response_tokens"] = args.max_response_tokens
    if args.endpoint:
        if not args.served_model:
            raise SystemExit("rstar2 eval: --served-model is required with --endpoint")
        overrides["inference"].update(
            base_urls=[args.endpoint], model=args.served_model, api_key_env=args.api_key_env,
            mode="tokens" if args.tokenizer else "chat",
        )
    elif args.served_model:
        overrides["inference"]["model"] = args.served_model
    # A chat model was not trained on rStar2's format: grade what it writes, boxed or not.
    chat = bool(args.endpoint) and not args.tokenizer
    overrides["reward"]["grading"] = args.grading or config.reward.grading or ("lenient" if chat else "strict")
    merged = _merge(msgspec.to_builtins(config), overrides)
    return convert(merged, EvalConfig)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(base.get(key, {}), value) if isinstance(value, dict) else value
    return out


def run(args: argparse.Namespace) -> int:
    import anyio

    from rstar2_async.rollout import RUN_OPTIONS

    return anyio.run(_main, args, _resolve(args), backend_options=RUN_OPTIONS)


async def _main(args: argparse.Namespace, config: EvalConfig) -> int:
    import anyio
    from rich.console import Console
    from rich.table import Table

    from rstar2_async.config import to_toml
    from rstar2_async.recipe import (
        evaluate,
        load_finished,
        load_problems,
        resolve,
        rollout_stack,
        show_progress,
    )
    from rstar2_async.rollout import tune_gc

    # Labels: a set's name, or a file's stem.  Loaded up front to fail fast on bad names.
    datasets = {resolve(name).stem: load_problems(name, limit=args.limit, fields=config.data) for name in args.data}
    name = args.model.name if args.model else config.inference.model.replace("/", "_")
    out = args.out or Path("runs/eval") / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.toml").write_text(to_toml(config))
    tune_gc()
    summaries = []
    async with rollout_stack(
        rollout=config.rollout,
        inference=config.inference,
        sandbox=config.sandbox,
        model_dir=args.model,
        tokenizer_dir=args.tokenizer,
        local_server=config.server,
        pool=config.pool,
        reward=config.reward,
        log_dir=out,
    ) as stack:
        engine = stack.engine
        for dataset, problems in datasets.items():
            done = len(load_finished(out / dataset / "samples.jsonl", problems))
            async with anyio.create_task_group() as tg:
                offset = done - engine.statistics().trajectories_finished  # resumed samples count as done
                tg.start_soon(partial(show_progress, engine, len(problems) * args.n, dataset, done_before=offset))
                summaries.append(await evaluate(engine, dataset, problems, n=args.n, out_dir=out / dataset))
                tg.cancel_scope.cancel()
    table = Table(
        title=f"{name}: n={args.n}, temperature={args.temperature}, top_p={args.top_p}, grading={config.reward.grading}"
    )
    for column in ("data set", "problems", "avg@n", "pass@n", "maj@n", "tokens", "turns", "tool calls", "tool errors"):
        table.add_column(column, justify="right")
    for s in summaries:
        table.add_row(
            s.dataset, str(s.problems), f"{s.avg_at_n:.3f}", f"{s.pass_at_n:.3f}", f"{s.maj_at_n:.3f}",
            f"{s.mean_response_tokens:.0f}", f"{s.mean_turns:.2f}", f"{s.mean_tool_calls:.2f}", f"{s.mean_tool_errors:.2f}",
        )
    Console(stderr=True).print(table)
    print(msgspec.json.encode(summaries).decode())
    return 0
