"""What the samples of one data set of `rstar2 eval` were made with, kept beside
them (``OUT/<set>/settings.json``), so that running the command again adds samples
only to those made the same way.

Resuming is how an interrupted evaluation finishes, and how ``--n`` grows; but a
run with another temperature, model, prompt or grading mode that resumed into the
same directory would mix two kinds of sample into one avg@n, and say nothing: its
summary would name only the new settings.  The record names what decides a sample
and its grade; the operational settings (timeouts, concurrency, shards, the seed)
may change between runs, and so may ``--n`` and ``--limit`` (more samples or
problems of the same kind).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from rstar2_async.config import EvalConfig

__all__ = ["REGRADED", "check_regradable", "check_resumable", "sample_settings", "write_record"]

RECORD = "settings.json"
_ROLLOUT_FIELDS = ("max_turns", "max_response_tokens", "system_prompt", "list_tools", "chat_template", "tools")


def sample_settings(config: EvalConfig, model: Path | None, data: Path) -> dict[str, Any]:
    """The settings that decide a sample and its grade, by dotted name: the model
    (its directory, or an endpoint's served model name), how it is asked (transport,
    prompt, tools, turns, budget, sampling but its seed), how it is graded, and the
    data set (its file's SHA-256: a gold answer corrected since would leave stored
    grades wrong) and how its rows are read."""
    rollout = msgspec.to_builtins(config.rollout)
    settings: dict[str, Any] = {
        "model": str(model.resolve()) if model is not None else config.inference.model,
        "inference.mode": config.inference.mode,
        "data.sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
    }
    settings |= {f"rollout.sampling.{k}": v for k, v in rollout["sampling"].items() if k != "seed"}
    settings |= {f"rollout.{k}": rollout.get(k) for k in _ROLLOUT_FIELDS}
    settings |= {"reward.function": config.reward.function, "reward.grading": config.reward.grading}
    settings |= {f"data.{k}": v for k, v in msgspec.to_builtins(config.data).items()}
    return json.loads(json.dumps(settings))  # as the record reads back


def check_resumable(directory: Path, settings: dict[str, Any]) -> None:
    """Refuse to resume into ``directory`` when it holds samples made otherwise.

    A directory without samples, or whose samples predate records, is no conflict.

    Raises:
        SystemExit: the samples there were made with other settings; the message
            names each one, then and now.
    """
    samples = directory / "samples.jsonl"
    if not (samples.exists() and samples.stat().st_size > 0):
        return
    if changed := _changed(directory, settings, ignore=()):
        raise SystemExit(
            f"rstar2 eval: {samples} holds samples made with other settings:\n{changed}\n"
            "Resuming would score both kinds together. Pass another --out, or delete that file to start the set over"
            " (or --regrade, when only the grading changed)."
        )


REGRADED = ("reward.function", "reward.grading")
"""What ``--regrade`` may change: how the stored samples are graded."""


def check_regradable(directory: Path, settings: dict[str, Any]) -> None:
    """Refuse to regrade ``directory`` unless it holds samples made as ``settings``
    say, but for how they are graded (`REGRADED`).

    Raises:
        SystemExit: no samples there, or they were made with other settings (named).
    """
    samples = directory / "samples.jsonl"
    if not (samples.exists() and samples.stat().st_size > 0):
        raise SystemExit(f"rstar2 eval --regrade: {samples} holds no samples to grade")
    if changed := _changed(directory, settings, ignore=REGRADED):
        raise SystemExit(
            f"rstar2 eval --regrade: {samples} holds samples made with other settings:\n{changed}\n"
            f"--regrade changes only how they are graded ({', '.join(REGRADED)}): pass the settings they were made with."
        )


def _changed(directory: Path, settings: dict[str, Any], ignore: tuple[str, ...]) -> str:
    """Each setting ``directory``'s record has otherwise, then and now, a line each."""
    record = directory / RECORD
    if not record.exists():
        return ""
    before = json.loads(record.read_text())
    # A setting one of the two records lacks (written by another version) cannot be compared.
    changed = [key for key in settings.keys() & before.keys() if before[key] != settings[key] and key not in ignore]
    return "\n".join(f"  {key}: {before[key]!r} then, {settings[key]!r} now" for key in sorted(changed))


def write_record(directory: Path, settings: dict[str, Any]) -> None:
    """Record ``settings`` as what the samples in ``directory`` are made with."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RECORD).write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")
