"""Step 1 of an RL step: problem sets, and the batch of one step.

A problem set is a JSONL file whose lines hold a problem and its answer (``id`` and
``source`` optional); which fields hold them is the run's ``[data]`` section
(:class:`rstar2_async.config.DataConfig`: ``problem``/``answer`` unless mapped).  A
bare name (``aime24``, ``math500``) resolves to ``<data dir>/<name>.jsonl``, where the
data dir is ``$RSTAR2_DATA_DIR`` or ``../shared/data`` beside the checkout.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from .._paths import data_dir
from ..config import DataConfig
from ..errors import DatasetError
from ..types import Problem

__all__ = ["batch_for_step", "data_dir", "load_problems", "resolve"]

_DEFAULT_FIELDS = DataConfig()


class _Line(msgspec.Struct):
    """A line with the default field names: decoded in one typed pass."""

    problem: str
    answer: str | int | float
    id: str | int | None = None
    source: str = ""


class _FieldError(ValueError):
    """A mapped field is missing or of the wrong type (becomes a DatasetError)."""


_decoder = msgspec.json.Decoder(_Line)
_any_decoder = msgspec.json.Decoder(dict[str, Any])


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


def load_problems(name_or_path: str | Path, *, limit: int | None = None, fields: DataConfig | None = None) -> list[Problem]:
    """Read a problem set.  Lines without an id get ``<file stem>-<line>``.

    Args:
        fields: which JSON fields hold the problem, the answer, the id and the
            source (default: ``problem``, ``answer``, ``id``, ``source``).

    Raises:
        DatasetError: the file is missing, a line is not a JSON object with a string
            problem and a string or numeric answer in those fields, or two lines share
            an id.
    """
    path = resolve(name_or_path)
    fields = fields or _DEFAULT_FIELDS
    read = _read_default if fields == _DEFAULT_FIELDS else _read_mapped
    problems: list[Problem] = []
    seen: set[str] = set()
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                pid, problem, answer, source = read(raw, fields)
            except (msgspec.DecodeError, msgspec.ValidationError, _FieldError) as exc:
                raise DatasetError(f"{path}:{lineno}: {exc}") from None
            pid = f"{path.stem}-{lineno}" if pid is None else str(pid)
            if pid in seen:
                raise DatasetError(f"{path}:{lineno}: duplicate id {pid!r}")
            seen.add(pid)
            problems.append(Problem(id=pid, problem=problem, answer=str(answer), source=source))
            if limit is not None and len(problems) >= limit:
                break
    if not problems:
        raise DatasetError(f"{path}: no problems")
    return problems


def _read_default(raw: bytes, fields: DataConfig) -> tuple[object, str, object, str]:
    line = _decoder.decode(raw)
    return line.id, line.problem, line.answer, line.source


def _read_mapped(raw: bytes, fields: DataConfig) -> tuple[object, str, object, str]:
    obj = _any_decoder.decode(raw)
    problem, answer = obj.get(fields.problem_field), obj.get(fields.answer_field)
    if not isinstance(problem, str):
        raise _FieldError(f"expected a string in field {fields.problem_field!r} (data.problem_field), got {problem!r}")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise _FieldError(f"expected a string or number in field {fields.answer_field!r} (data.answer_field), got {answer!r}")
    source = obj.get(fields.source_field, "")
    return obj.get(fields.id_field), problem, answer, source if isinstance(source, str) else str(source)


def batch_for_step(problems: Sequence[Problem], batch_size: int, *, seed: int, stage: int, step: int) -> list[Problem]:
    """The problems of one step: epochs of seeded permutations, read in order.  A pure
    function of its arguments, so resume draws the same batch."""
    out: list[Problem] = []
    start = step * batch_size
    while len(out) < batch_size:
        epoch, offset = divmod(start + len(out), len(problems))
        order = list(range(len(problems)))
        random.Random(f"{seed}/{stage}/{epoch}").shuffle(order)
        take = min(batch_size - len(out), len(problems) - offset)
        out += [problems[i] for i in order[offset : offset + take]]
    return out
