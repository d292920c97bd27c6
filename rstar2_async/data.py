"""Problem sets: JSONL files with ``problem`` and ``answer`` (``id``, ``source`` optional).

A bare name (``aime24``, ``math500``) resolves to ``<data dir>/<name>.jsonl``, where
the data dir is ``$RSTAR2_DATA_DIR`` or ``../shared/data`` beside the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from .types import Problem

_REPO = Path(__file__).resolve().parents[1]


class DatasetError(ValueError):
    """A data set is missing or has a bad line; the message names file and line."""


class _Line(msgspec.Struct):
    problem: str
    answer: str | int | float
    id: str | int | None = None
    source: str = ""


_decoder = msgspec.json.Decoder(_Line)


def data_dir() -> Path:
    return Path(os.environ.get("RSTAR2_DATA_DIR", _REPO.parent / "shared" / "data"))


def resolve(name_or_path: str | Path) -> Path:
    """The file a data set name or path refers to.

    Raises:
        DatasetError: nothing exists there; the message lists the known names.
    """
    path = Path(name_or_path)
    if path.suffix == ".jsonl" or path.exists():
        if not path.is_file():
            raise DatasetError(f"data set not found: {path}")
        return path
    candidate = data_dir() / f"{name_or_path}.jsonl"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in data_dir().glob("*.jsonl"))
    raise DatasetError(f"unknown data set {str(name_or_path)!r}: not a file, and not one of {known} in {data_dir()}")


def load_problems(name_or_path: str | Path, *, limit: int | None = None) -> list[Problem]:
    """Read a problem set.  Lines without an ``id`` get ``<file stem>-<line>``.

    Raises:
        DatasetError: the file is missing, a line is not a JSON object with string
            ``problem`` and ``answer``, or two lines share an id.
    """
    path = resolve(name_or_path)
    problems: list[Problem] = []
    seen: set[str] = set()
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                line = _decoder.decode(raw)
            except msgspec.DecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: {exc}") from None
            pid = f"{path.stem}-{lineno}" if line.id is None else str(line.id)
            if pid in seen:
                raise DatasetError(f"{path}:{lineno}: duplicate id {pid!r}")
            seen.add(pid)
            problems.append(Problem(id=pid, problem=line.problem, answer=str(line.answer), source=line.source))
            if limit is not None and len(problems) >= limit:
                break
    if not problems:
        raise DatasetError(f"{path}: no problems")
    return problems
