"""Lenient mode and math-verify on every model run ZeroEval stored, beside the accuracy
ZeroEval published for each: real replies of 40-odd chat models to MATH level 5 and
GSM8K, asked for a JSON reply (``{"reasoning": ..., "answer": ...}``).

The replies are not in this repository (tests/reward/data keeps three models' MATH
runs); fetch WildEval/ZeroEval (Apache-2.0) first, then::

    PYTHONPATH=. python benchmarks/grader_zeroeval_runs.py [--repo DIR] [--tasks math-l5 gsm]

ZeroEval grades the first number of the first JSON answer field it finds against the
gold's first number, so a gap is not always ours: it pays ``6\\sqrt{2}`` for 6 and reads
a reply's first JSON where the model corrected itself in a second.  A run far from its
published figure is where to read replies.  Per task: ``runs`` (those with a published
accuracy under the same name), ``within_1pt_lenient`` and ``within_1pt_math_verify``
(runs whose accuracy is within a point of the published one), the median absolute gap
of each grader, and the widest gaps.  Prints a line per run, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path

from grader_agreement import math_verify_verdict

from rstar2_async.reward import score

WIDEST = 5
"""How many of the widest gaps each task reports."""


def git(repo: Path, *args: str) -> str:
    """The output of a git command on the fetched repository."""
    return subprocess.run(["git", f"--git-dir={repo}", *args], capture_output=True, text=True, check=True).stdout


def show(repo: Path, path: str) -> str:
    return git(repo, "show", f"HEAD:{path}")


def grade_run(items: list[dict]) -> dict:
    """Accuracy (%) of each grader on one run; the gold as ZeroEval cleans it (no ``#``)."""
    lenient = math_verify = 0
    for item in items:
        gold, reply = item["answer"].replace("#", "").strip(), item["output"][0]
        lenient += score(reply, gold, mode="lenient") == 1.0
        math_verify += math_verify_verdict(reply, "\\boxed{" + gold + "}")  # a bare answer, read boxed
    n = len(items)
    return {"replies": n, "lenient": round(100 * lenient / n, 2), "math_verify": round(100 * math_verify / n, 2)}


def summary(runs: dict[str, dict]) -> dict:
    published = {m: r for m, r in runs.items() if r["published"] is not None}

    def gaps(key: str) -> dict[str, float]:
        return {m: round(r[key] - r["published"], 2) for m, r in published.items()}

    out: dict = {"runs": len(published)}
    for key in ("lenient", "math_verify"):
        gap = gaps(key)
        out[f"within_1pt_{key}"] = sum(abs(g) <= 1.0 for g in gap.values())
        out[f"median_abs_gap_{key}"] = round(statistics.median(abs(g) for g in gap.values()), 2)
        out[f"widest_{key}"] = dict(sorted(gap.items(), key=lambda kv: -abs(kv[1]))[:WIDEST])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("/work/.mirror/WildEval+ZeroEval/repo"))
    parser.add_argument("--tasks", nargs="+", default=["math-l5", "gsm"])
    args = parser.parse_args()
    if not args.repo.is_dir():
        sys.exit(f"--repo: {args.repo} is no git directory; fetch WildEval/ZeroEval first")
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    out: dict = {"benchmark": "grader_zeroeval_runs"}
    t0 = time.perf_counter()
    for task in args.tasks:
        published = {
            r["Model"]: float(r["Acc"]) for r in json.loads(show(args.repo, f"result_dirs/{task}.summary.json"))
        }
        names = git(args.repo, "ls-tree", "--name-only", f"HEAD:result_dirs/{task}").split()
        runs, absent = {}, []
        for name in sorted(n for n in names if n.endswith(".json")):
            model = name.removesuffix(".json")
            try:
                items = json.loads(show(args.repo, f"result_dirs/{task}/{name}"))
            except subprocess.CalledProcessError:  # a snapshot may list a large file it lacks
                absent.append(model)
                continue
            runs[model] = grade_run(items) | {"published": published.get(model)}
            print(task, model, runs[model], flush=True)
        out[task] = summary(runs) | {"absent": absent}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
