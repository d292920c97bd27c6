"""Reading a run directory while it is written: metrics, trajectory tables, records.

Read-only: nothing here opens a file for writing.  Every file is append-only on the
writer's side, so each is read up to its last whole line (a line being written is
left for the next read) and a table only reads what was appended since the last call.

Sources of trajectories (each a table of :class:`~rstar2_async.recipe.IndexRow`):

    train             ``trajectories/index.jsonl`` over ``trajectories/records.jsonl``
                      (``rstar2 train``'s recorder)
    <dir>             a ``<dir>/samples.jsonl`` of ``Trajectory`` lines under the run
                      (``eval/step-*/<set>/`` of a training run, ``<set>/`` of ``rstar2 eval``);
                      indexed in memory when first read
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path
from typing import Any, Final

import msgspec

from ..errors import Rstar2Error
from ..recipe import IndexRow, TrajectoryRecord, index_row, to_record
from ..types import Trajectory

__all__ = ["Query", "RunDirError", "RunReader", "Table"]

SORTABLE: Final = (
    "step", "problem_id", "sample_index", "reward", "turns", "tool_calls", "tool_errors",
    "response_tokens", "finish_reason", "weight_version", "roc", "penalty",
)  # fmt: skip


SEARCH_CHUNK: Final = 1 << 24
"""Bytes of ``records.jsonl`` read (and lowercased) at a time by a text search: large
enough that finding is memchr-speed, small enough to bound the memory a search takes."""


class RunDirError(Rstar2Error):
    """The run directory is missing or holds nothing to show."""


class Query(msgspec.Struct, frozen=True, kw_only=True):
    """One page of a table: filters (all optional), sort and page (from the URL)."""

    source: str = "train"
    step: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    finish: str = ""
    roc: str = ""
    """``kept``, ``dropped`` (any reason) or one reason."""
    problem: str = ""
    """Problem ids containing this."""
    q: str = ""
    """Text search (case-insensitive) in the trajectory's text: turns and tool output."""
    sort: str = "step"
    desc: bool = False
    page: int = 0
    size: int = 50


_trajectory = msgspec.json.Decoder(Trajectory)
_record = msgspec.json.Decoder(TrajectoryRecord)
_rows = msgspec.json.Decoder(list[IndexRow])


def whole_lines(path: Path, start: int = 0) -> tuple[bytes, int]:
    """The bytes of ``path`` from ``start`` up to its last newline, and where they end."""
    try:
        with path.open("rb") as f:
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return b"", start
    end = data.rfind(b"\n") + 1
    return data[:end], start + end


class Table:
    """One source's rows, grown by what was appended since the last :meth:`refresh`."""

    def __init__(self, index: Path | None, data: Path, step: int = -1) -> None:
        self.index, self.data, self.step = index, data, step
        self.rows: list[IndexRow] = []
        self.offsets: list[int] = []  # rows' record offsets, ascending (the files are append-only)
        self._read = 0
        self._steps: dict[int, int] = {}
        self._latest: dict[tuple[int, str, int], int] = {}  # (step, problem, sample) -> row
        self.superseded: set[int] = set()
        """Rows a later row replaced: a resumed run rolls out again the steps after its
        checkpoint, and what it records then is the run's history."""

    def refresh(self) -> None:
        if self.index is not None:
            chunk, self._read = whole_lines(self.index, self._read)
            new = _rows.decode(b"[" + chunk.replace(b"\n", b",").rstrip(b",") + b"]") if chunk else []
        else:  # a samples.jsonl: index it ourselves
            chunk, start = whole_lines(self.data, self._read)
            new, offset = [], self._read
            for line in chunk.split(b"\n")[:-1]:
                t = _trajectory.decode(line)
                new.append(index_row(to_record(t, None, step=self.step, stage="eval"), offset, len(line)))
                offset += len(line) + 1
            self._read = start
        for i, row in enumerate(new, len(self.rows)):
            old = self._latest.get(key := (row.step, row.problem_id, row.sample_index))
            if old is not None:
                self.superseded.add(old)
            else:
                self._steps[row.step] = self._steps.get(row.step, 0) + 1
            self._latest[key] = i
        self.rows += new
        self.offsets += [r.offset for r in new]

    def steps(self) -> dict[int, int]:
        """Trajectories per step."""
        return dict(self._steps)

    def record(self, i: int) -> TrajectoryRecord:
        """The full record of row ``i``.

        Raises:
            IndexError: no such row."""
        row = self.rows[i]
        with self.data.open("rb") as f:
            f.seek(row.offset)
            line = f.read(row.length)
        if self.index is not None:
            return _record.decode(line)
        return to_record(_trajectory.decode(line), None, step=self.step, stage="eval")

    def search(self, text: str, candidates: list[int]) -> list[int]:
        """Of ``candidates`` (row numbers), those whose record contains ``text`` (ASCII
        case-insensitively): one pass over the data file in chunks, each hit mapped to
        its row by offset, the rest of a record that matched skipped."""
        if not candidates:
            return []
        needle = msgspec.json.encode(text)[1:-1].lower()  # as it is written in JSON
        hits: set[int] = set()
        tail, base = b"", 0  # the end of the previous chunk: a match may straddle two
        with self.data.open("rb") as f:
            while block := f.read(SEARCH_CHUNK):
                buf, start = (tail + block).lower(), base - len(tail)
                at = buf.find(needle)
                while at >= 0:
                    i = bisect.bisect_right(self.offsets, start + at) - 1
                    end = self.offsets[i] + self.rows[i].length if i >= 0 else 0
                    if start + at + len(needle) <= end:
                        hits.add(i)
                        at = buf.find(needle, max(at + 1, end - start))
                    else:
                        at = buf.find(needle, at + 1)
                tail = buf[max(0, len(buf) - len(needle) + 1):] if len(needle) > 1 else b""
                base += len(block)
        return [i for i in candidates if i in hits]

    def page(self, query: Query) -> dict[str, Any]:
        """Filter, sort and cut one page; rows come back as dicts with their row number ``i``."""
        rows = self.rows
        keep = [i for i in range(len(rows)) if i not in self.superseded] if self.superseded else range(len(rows))
        if query.step is not None:
            keep = [i for i in keep if rows[i].step == query.step]
        if query.reward_min is not None:
            keep = [i for i in keep if rows[i].reward >= query.reward_min]
        if query.reward_max is not None:
            keep = [i for i in keep if rows[i].reward <= query.reward_max]
        if query.finish:
            keep = [i for i in keep if rows[i].finish_reason == query.finish]
        if query.roc == "dropped":
            keep = [i for i in keep if rows[i].roc not in ("kept", "")]
        elif query.roc:
            keep = [i for i in keep if rows[i].roc == query.roc]
        if query.problem:
            keep = [i for i in keep if query.problem in rows[i].problem_id]
        keep = list(keep)
        if query.q:
            keep = self.search(query.q, keep)
        if query.sort not in SORTABLE:
            raise ValueError(f"sort: expected one of {', '.join(SORTABLE)}, got {query.sort!r}")
        if query.sort != "step" or query.desc:
            field = query.sort
            keep.sort(key=lambda i: (getattr(rows[i], field), i), reverse=query.desc)
        start = query.page * query.size
        page = [{"i": i, **msgspec.structs.asdict(rows[i])} for i in keep[start:start + query.size]]
        for p in page:
            del p["offset"], p["length"]
        return {"total": len(keep), "page": query.page, "size": query.size, "rows": page}


class RunReader:
    """A run directory of ``rstar2 train`` or ``rstar2 eval``, read as it grows.

    Raises:
        RunDirError: ``run_dir`` is not a directory, or holds none of the files
            either command writes.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        if not run_dir.is_dir():
            raise RunDirError(f"{run_dir} is not a directory: give the run directory of `rstar2 train` or `rstar2 eval`")
        if not self.has_content():
            raise RunDirError(
                f"{run_dir} holds no metrics.jsonl, trajectories/ or */samples.jsonl: "
                "is it a run directory of `rstar2 train` or `rstar2 eval`?"
            )
        self._metrics: list[dict[str, Any]] = []
        self._metrics_read = 0
        self._tables: dict[str, Table] = {}

    def has_content(self) -> bool:
        d = self.run_dir
        return (d / "metrics.jsonl").exists() or (d / "trajectories").is_dir() or bool(self._eval_files())

    def _eval_files(self) -> list[Path]:
        return sorted(self.run_dir.glob("eval/*/*/samples.jsonl")) + sorted(self.run_dir.glob("*/samples.jsonl"))

    def metrics(self) -> list[dict[str, Any]]:
        """Every whole line of ``metrics.jsonl`` so far (lines that are not a step's
        record are left out)."""
        chunk, self._metrics_read = whole_lines(self.run_dir / "metrics.jsonl", self._metrics_read)
        for line in chunk.split(b"\n"):
            try:
                record = msgspec.json.decode(line) if line.strip() else None
            except msgspec.DecodeError:  # a line a killed run left half-written, which its resume went on after
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                self._metrics.append(record)
        return self._metrics

    def sources(self) -> list[str]:
        """``train`` (if the recorder wrote) and each evaluation's directory, relative to the run."""
        out = ["train"] if (self.run_dir / "trajectories" / "index.jsonl").exists() else []
        return out + [p.parent.relative_to(self.run_dir).as_posix() for p in self._eval_files()]

    def table(self, source: str) -> Table:
        """The source's table, refreshed.

        Raises:
            KeyError: no such source in this run."""
        table = self._tables.get(source)
        if table is None:
            if source == "train":
                base = self.run_dir / "trajectories"
                table = Table(base / "index.jsonl", base / "records.jsonl")
            elif source in self.sources():
                at = re.search(r"step-(\d+)", source)  # a training run's eval/step-000020-rl/<set>
                table = Table(None, self.run_dir / source / "samples.jsonl", int(at.group(1)) if at else -1)
            else:
                raise KeyError(source)
            self._tables[source] = table
        table.refresh()
        return table

    def group(self, source: str, step: int, problem_id: str) -> list[dict[str, Any]]:
        """Every sample of one problem at one step, by sample index."""
        table = self.table(source)
        rows = [i for i, r in enumerate(table.rows) if r.step == step and r.problem_id == problem_id and i not in table.superseded]
        out = []
        for i in sorted(rows, key=lambda i: table.rows[i].sample_index):
            r = table.record(i)
            out.append({"i": i, **msgspec.structs.asdict(r), "turns": len(r.turns)})
        return out
