"""``rstar2 report``: a run's curves and a sample of its trajectories as one HTML file.

The file is self-contained (the page's CSS and JS inlined, the data as JSON inside
it): it opens offline, attached to an issue or a review.  Per step it keeps the best,
the worst and one random trajectory (seeded: the same run gives the same report).
"""

from __future__ import annotations

import html
import random
from pathlib import Path
from typing import Any

import msgspec

from ..recipe import PLOTS
from ._app import asset_text
from ._source import RunReader

__all__ = ["build_report"]


def _picks(reader: RunReader, source: str, seed: int) -> list[dict[str, Any]]:
    table = reader.table(source)
    by_step: dict[int, list[int]] = {}
    for i, row in enumerate(table.rows):
        by_step.setdefault(row.step, []).append(i)
    rng = random.Random(seed)
    out = []
    for step, rows in sorted(by_step.items()):
        ranked = sorted(rows, key=lambda i: (table.rows[i].reward, -table.rows[i].penalty))
        picks = [("best", ranked[-1]), ("worst", ranked[0]), ("random", rng.choice(rows))]
        out.append({"step": step, "picks": [(label, table.record(i)) for label, i in picks]})
    return out


def build_report(run_dir: Path, *, seed: int = 0) -> str:
    """The report's HTML.

    Raises:
        RunDirError: the run directory is missing or empty."""
    reader = RunReader(run_dir)
    sources = reader.sources()
    samples = _picks(reader, sources[0], seed) if sources else []
    data = {"metrics": reader.metrics(), "plots": {k.replace("_", " "): list(v) for k, v in PLOTS.items()}, "samples": samples}
    # "</" inside a script element would end it early: JSON allows the escape.
    payload = msgspec.json.encode(data).decode().replace("</", "<\\/")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rstar2 report: {html.escape(run_dir.name)}</title>
<style>{asset_text("app.css")}</style>
<script>{asset_text("charts.js")}</script>
<script>{asset_text("report.js")}</script>
<script id="data" type="application/json">{payload}</script>
</head><body>
<header><b>rstar2 report</b> · {html.escape(run_dir.name)}</header>
<main><h2>curves</h2><div id="charts" class="charts"></div>
<h2>trajectories ({sources[0] if sources else "none"}): best, worst and random per step</h2><div id="samples"></div></main>
</body></html>
"""
