"""Write a run's curves and a sample of its trajectories as one self-contained HTML file.

Per step the best, the worst and one random trajectory (seeded), with every curve of
metrics.jsonl; the file works offline, to attach to an issue or a review.

Example:
  rstar2 report runs/cpu-demo -o report.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "one self-contained HTML file of a run's curves and sample trajectories"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="run directory of `rstar2 train` or `rstar2 eval`")
    p.add_argument("-o", "--out", type=Path, default=Path("report.html"), help="output file (default report.html)")
    p.add_argument("--seed", type=int, default=0, help="seeds the random pick per step")


def run(args: argparse.Namespace) -> int:
    from rstar2_async.view import build_report

    html = build_report(args.run_dir, seed=args.seed)
    args.out.write_text(html, encoding="utf-8")
    print(f"rstar2 report: wrote {args.out} ({len(html) // 1024} KiB)", file=sys.stderr)
    return 0
