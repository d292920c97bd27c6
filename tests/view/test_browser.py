"""`rstar2 view` in a real browser: Debian's headless Chromium over the DevTools protocol.

The run directory is generated (``write_sample_run``: the recorder's own files, no
training).  Screenshots of each page are saved under the test's temporary directory
(``RSTAR2_SCREENSHOTS=DIR`` saves them there instead, for the README)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rstar2_async.view import Query, RunReader, build_report, write_sample_run

from ._cdp import Page, browser, find_browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(find_browser() is None, reason="no chromium: `make test` installs Debian's (make browser)"),
]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "cpu-demo"
    write_sample_run(d, steps=4, problems=4, samples=8, keep=4)
    return d


@pytest.fixture
def view_url(run_dir: Path) -> Iterator[str]:
    """``rstar2 view RUN_DIR --port 0`` in a process of its own; its URL."""
    code = "import sys; from rstar2_async.cli.main import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", code, "view", str(run_dir), "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"at (http://\S+)", line)
        assert found, f"rstar2 view said: {line}{proc.stderr.read() if proc.poll() is not None else ''}"
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _open(page: Page, url: str) -> None:
    """Go to ``url`` and wait for the page to have drawn it."""
    page.js("document.getElementById('main') && delete document.getElementById('main').dataset.ready")
    page.call("Page.navigate", url=url)
    page.wait("document.getElementById('main').dataset.ready === '1'")


def _redrawn(page: Page, action: str) -> None:
    """Do ``action`` in the page (a click, a change) and wait for the redraw it causes."""
    page.js(f"delete document.getElementById('main').dataset.ready; {action}; true")
    page.wait("document.getElementById('main').dataset.ready === '1'")


def test_the_pages_render_filter_and_show_a_tool_call_in_a_real_browser(run_dir: Path, view_url: str, tmp_path: Path) -> None:
    shots = Path(os.environ.get("RSTAR2_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    table = RunReader(run_dir).table("train")
    with browser(tmp_path / "profile") as page:
        # Curves: every chart drawn, with as many points as metrics.jsonl has steps.
        _open(page, view_url + "#/curves?m=rollout/reward_mean,rollout/tool_errors_mean")
        drawn = page.js("""[...document.querySelectorAll('svg.chart')].map(svg => ({
            title: svg.dataset.title,
            lines: [...svg.querySelectorAll('path.series')].map(p => [+p.dataset.points, p.getBBox().width]),
            bars: svg.querySelectorAll('rect.series').length}))""")
        assert [c["title"] for c in drawn] == ["selected metrics", "held-out accuracy", "phase times per step (s)"]
        assert [points for points, _ in drawn[0]["lines"]] == [4, 4] and all(width > 100 for _, width in drawn[0]["lines"])
        assert [points for points, _ in drawn[1]["lines"]] == [2, 2]  # evaluations at steps 2 and 4
        assert drawn[2]["bars"] == 4 * 4 + 2  # four phases stacked per step, evaluation on top at steps 2 and 4
        page.screenshot(shots / "curves.png")
        # Tiny values (a train/inference mismatch of a few 1e-6 nats): every tick label inside the chart.
        ticks = page.js("""[...lineChart(document.body, 'tiny', [{name: 'm', xs: [1, 2, 3], ys: [2.4e-6, 9.1e-6, 5e-6]}])
            .querySelectorAll('text.tick')].map(t => [t.textContent, t.getBBox().x])""")
        assert len(ticks) > 3 and all(x >= 0 for _, x in ticks), ticks

        # The table: the first page of every trajectory, then a filter chosen in the form.
        _open(page, view_url + "#/trajectories")
        assert page.js("+document.getElementById('total').dataset.total") == 128 == len(table.rows)
        assert page.js("document.querySelectorAll('tr.traj-row').length") == 50
        page.screenshot(shots / "trajectories.png")
        _redrawn(page, "const s = document.querySelector('select[name=finish]'); s.value = 'answer'; s.dispatchEvent(new Event('change'))")
        answered = table.page(Query(finish="answer", size=1000))["total"]
        assert 0 < answered < 128
        assert page.js("+document.getElementById('total').dataset.total") == answered
        assert set(page.js("[...document.querySelectorAll('td.c-finish_reason')].map(td => td.textContent)")) == {"answer"}
        _redrawn(page, "const q = document.querySelector('input[name=q]'); q.value = 'NameError'; document.getElementById('filters').requestSubmit()")
        searched = table.page(Query(finish="answer", q="NameError", size=1000))
        assert 0 < searched["total"] < answered
        assert page.js("[...document.querySelectorAll('tr.traj-row')].map(tr => +tr.dataset.i)") == [r["i"] for r in searched["rows"]]

        # A trajectory: the tool call's code, highlighted, and its output; the loss mask on request.
        first = searched["rows"][0]["i"]
        _redrawn(page, "document.querySelector('tr.traj-row td.c-reward').click()")
        record = table.record(first)
        code = record.turns[0].tools[0].code
        assert page.js("document.querySelector('pre.code').textContent") == code
        assert page.js("document.querySelectorAll('pre.code .tok-kw').length") > 0  # `print` highlighted
        assert "NameError" in page.js("[...document.querySelectorAll('pre.output')].map(p => p.textContent).join()")
        assert page.js("document.querySelectorAll('.msg.masked').length") == 0
        _redrawn(page, "document.getElementById('mask').click()")
        assert page.js("document.querySelectorAll('.msg.masked').length") == sum(1 for t in record.turns if t.tool_text)
        page.screenshot(shots / "trajectory.png")

        # Its group: every sample of the problem at that step, with RoC's decisions.
        _redrawn(page, "[...document.querySelectorAll('a')].find(a => a.textContent === 'its group').click()")
        assert page.js("document.querySelectorAll('.group .sample').length") == 8
        page.screenshot(shots / "group.png")

        # Live: steps the trainer appends appear without a reload.
        _open(page, view_url + "#/trajectories")
        write_sample_run(run_dir, steps=1, problems=4, samples=8, keep=4, eval_every=0, first_step=5)
        assert page.wait("+document.getElementById('total').dataset.total === 160 && 160") == 160
        # The report: one file, opened from disk, draws the same charts and the picks of each step.
        report = tmp_path / "report.html"
        report.write_text(build_report(run_dir))
        page.call("Page.navigate", url=report.as_uri())
        page.wait("document.querySelectorAll('section.step').length === 5")
        assert page.js("document.querySelectorAll('section.step details').length") == 5 * 3  # best, worst, random
        assert page.js("[...document.querySelectorAll('svg.chart path.series')].filter(p => p.getBBox().width > 100).length") >= 5
        page.screenshot(shots / "report.png")
    assert all((shots / f"{name}.png").stat().st_size > 10_000 for name in ("curves", "trajectories", "trajectory", "group", "report"))
