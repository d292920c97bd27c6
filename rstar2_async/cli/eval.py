"""Evaluate a model with tools on math problem sets: avg@n, pass@n, maj@n.

Either a model directory (a checkpoint: a vLLM server is started for it) or any
OpenAI-compatible endpoint.  Sampling is always explicit: --temperature and --top-p
are required.  Every sample is kept in OUT/<dataset>/samples.jsonl; running the same
command again resumes without redoing finished samples (and refuses to, naming the
setting, when the samples there were made with another model, prompt, sampling or
grading: see OUT/<dataset>/settings.json).  --regrade grades every stored sample again
under another grading mode or reward function, without sampling (--n and --limit are
ignored).

A checkpoint of `rstar2 train` carries the rollout settings it was trained with
(rollout.toml: system prompt, tools, turns, response budget); --model (or --tokenizer,
for an endpoint in token mode) uses them unless --config or the flags say otherwise.
Grading follows the same record: strict (rStar2's boxed answer) for a model trained
here, lenient (an answer boxed or written out) for any other, whatever the transport;
the first line on stderr says which and why.  --config takes an eval config or a
training config (its [rollout], [inference], [server], [pool], [sandbox], [reward]
and [data]).  Errored samples are counted apart, not as wrong answers; when more
than 10% of a data set's samples error, the first error is printed and the exit
status is 1 (running the command again redoes the errored samples).

Examples:
  rstar2 eval --model runs/demo/weights/latest --data aime24 --n 4 --temperature 0.6 --top-p 0.95
  rstar2 eval --model DIR --engine transformers --data DATA.jsonl --n 1 --temperature 0 --top-p 1  (no server)
  OPENAI_API_KEY=... rstar2 eval --endpoint https://api.example.com/v1 --served-model m \\
      --data math500 --limit 50 --n 1 --temperature 0 --top-p 1
  rstar2 eval --endpoint http://127.0.0.1:8000/v1 --served-model m --tokenizer DIR ...  (token mode)
  rstar2 eval --model DIR --data aime24 --temperature 0.6 --top-p 0.95 --grading lenient --regrade
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from rstar2_async.config import EvalConfig
    from rstar2_async.recipe import EvalSummary
    from rstar2_async.types import Problem

HELP = "evaluate a checkpoint or an OpenAI-compatible endpoint on math sets (avg@n, pass@n, maj@n)"

MAX_ERROR_SHARE = 0.1
"""Above this share of errored samples in a data set the command fails: its metrics
describe too few of the samples asked for to be reported as the model's."""


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
        help="TOML with [rollout], [inference], [server], [pool], [sandbox], [reward], [data] sections (all optional), "
        "or a training config (rstar2 train's, or a run's config.toml)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="output directory (default runs/eval/<model>)")
    p.add_argument(
        "--grading", choices=("strict", "lenient"), default=None,
        help="strict: rStar2's boxed answer only; lenient: also an answer written without a box "
        "(default: reward.grading, else strict for a model that carries rstar2's rollout.toml, lenient for any other)",
    )  # fmt: skip
    p.add_argument(
        "--regrade", action="store_true",
        help="grade the samples already in OUT/<set> again under this command's grading (--grading, reward.function) "
        "and rewrite their rewards and summary; nothing is sampled and no server starts. The other settings must be "
        "those the samples were made with; --n and --limit are ignored (every stored sample is graded)",
    )  # fmt: skip


def _resolve(args: argparse.Namespace) -> EvalConfig:
    import sys

    from rstar2_async.config import ROLLOUT_RECORD, EvalConfig, convert, eval_sections, read_rollout_record

    merged = msgspec.to_builtins(EvalConfig())
    given, training = eval_sections(args.config) if args.config else ({}, False)
    # The model's own record: a checkpoint's (--model), or the tokenizer's of an endpoint in token mode.
    model = args.model or args.tokenizer
    recorded = read_rollout_record(model) if model else None
    if recorded is not None:  # the checkpoint's own settings, under --config's and the flags
        merged = _merge(merged, {"rollout": msgspec.to_builtins(recorded)})
        under = ", under --config's [rollout]" if "rollout" in given else ""
        settings = f"rollout settings from {model / ROLLOUT_RECORD} (as trained){under}"
    elif model and "rollout" not in given:
        settings = f"{model} has no {ROLLOUT_RECORD}: default rollout settings (--config sets them)"
    else:
        settings = "rollout settings from --config" if "rollout" in given else "default rollout settings"
    if training:
        print(f"rstar2 eval: {args.config} is a training config: its rollout, server and reward settings apply", file=sys.stderr)
    merged = _merge(merged, given)
    grading, why = _grading(args.grading, merged["reward"].get("grading"), recorded is not None)
    print(f"rstar2 eval: {settings}; {grading} grading {why}", file=sys.stderr)
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
    overrides["reward"]["grading"] = grading
    return convert(_merge(merged, overrides), EvalConfig)


def _grading(flag: str | None, configured: str | None, recorded: bool) -> tuple[str, str]:
    """The grading mode and why, for the start-up line.  Unless --grading or
    ``reward.grading`` says otherwise, it follows whether the model carries our rollout
    record (trained here, on rStar2's format), whatever the transport: a model that
    never saw the format is not scored on it."""
    from rstar2_async.config import ROLLOUT_RECORD

    if flag:
        return flag, "(--grading)"
    if configured:
        return configured, "(reward.grading in --config)"
    if recorded:
        return "strict", f"(its {ROLLOUT_RECORD}: trained here on rStar2's format; --grading lenient: unboxed too)"
    return "lenient", (
        f"(no {ROLLOUT_RECORD}, so a model not trained here on rStar2's format: an answer counts boxed or written out; "
        "--grading strict scores the format)"
    )


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

    from rstar2_async.cli._eval_record import check_regradable, check_resumable, sample_settings, write_record
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
    files = [resolve(data) for data in args.data]
    # --regrade grades every stored sample, whatever --limit says: the record will name the new grading.
    limit = None if args.regrade else args.limit
    datasets = {file.stem: load_problems(file, limit=limit, fields=config.data) for file in files}
    settings = {file.stem: sample_settings(config, args.model, file) for file in files}
    name = args.model.resolve().name if args.model else config.inference.model.replace("/", "_")
    out = args.out or Path("runs/eval") / name
    for dataset in datasets:  # all checked before any record changes, and before a server starts
        (check_regradable if args.regrade else check_resumable)(out / dataset, settings[dataset])
    if args.regrade:
        summaries = await _regrade(out, datasets, config)
    out.mkdir(parents=True, exist_ok=True)
    for dataset in datasets:
        write_record(out / dataset, settings[dataset])
    (out / "config.toml").write_text(to_toml(config))
    if args.regrade:
        return _report(name, args, config, summaries)
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
                summaries.append(await evaluate(
                    engine, dataset, problems, n=args.n, out_dir=out / dataset, sampling=config.rollout.sampling,
                    mode=config.reward.grading or "strict",
                ))  # fmt: skip
                tg.cancel_scope.cancel()
    return _report(name, args, config, summaries)


async def _regrade(out: Path, datasets: dict[str, list[Problem]], config: EvalConfig) -> list[EvalSummary]:
    """Each set's stored samples graded again (``--regrade``), by a grader of this
    command's ``[reward]``."""
    import sys

    from rstar2_async.recipe import regrade
    from rstar2_async.reward import Grader

    reward, summaries = config.reward, []
    mode = reward.grading or "strict"
    async with Grader(workers=reward.workers, timeout=reward.timeout_s, function=reward.function, mode=mode) as grader:
        for dataset, problems in datasets.items():
            summary, unspanned = await regrade(
                dataset, problems, out_dir=out / dataset, reward=grader, sampling=config.rollout.sampling, mode=mode
            )
            if unspanned:
                print(
                    f"rstar2 eval --regrade: {unspanned} samples of {dataset} were stored without turn spans (an older "
                    "version): graded from their whole transcript, tool output included",
                    file=sys.stderr,
                )
            summaries.append(summary)
    return summaries


def _report(name: str, args: argparse.Namespace, config: EvalConfig, summaries: list[EvalSummary]) -> int:
    """The table on stderr, the summaries' JSON as stdout's last line; the exit status."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{name}: n={max(s.n for s in summaries)}, temperature={args.temperature}, top_p={args.top_p}, "
        f"grading={config.reward.grading}"
    )
    columns = ("data set", "problems", "avg@n", "errors", "pass@n", "maj@n", "tokens", "turns", "tool calls", "tool errors")
    for column in columns:
        table.add_column(column, justify="right")
    for s in summaries:
        table.add_row(
            s.dataset, str(s.problems), f"{s.avg_at_n:.3f}", f"{s.errors}/{s.problems * s.n}", f"{s.pass_at_n:.3f}",
            f"{s.maj_at_n:.3f}" + (f" ({s.maj_at_n_capped} capped)" if s.maj_at_n_capped else ""),
            f"{s.mean_response_tokens:.0f}", f"{s.mean_turns:.2f}", f"{s.mean_tool_calls:.2f}",
            f"{s.mean_tool_errors:.2f}",
        )  # fmt: skip
    Console(stderr=True).print(table)
    print(msgspec.json.encode(summaries).decode())
    return _errors_status(summaries)


def _errors_status(summaries: list[EvalSummary]) -> int:
    """1, with the first error on stderr, when a data set errored on more than
    :data:`MAX_ERROR_SHARE` of its samples; else 0."""
    import sys

    for s in summaries:
        if s.errors > MAX_ERROR_SHARE * s.problems * s.n:
            print(
                f"rstar2 eval: {s.errors} of {s.problems * s.n} samples of {s.dataset} errored (more than "
                f"{MAX_ERROR_SHARE:.0%}; avg@n is over the other {s.problems * s.n - s.errors}): the first: {s.first_error}",
                file=sys.stderr,
            )
            return 1
    return 0
