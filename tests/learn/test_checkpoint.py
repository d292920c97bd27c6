"""Kill-and-resume: a run killed at any point (SIGKILL mid-step, a crash in the
middle of writing a checkpoint, a disk that fills up under it) resumes from its last
complete checkpoint and produces the same next batches and the same losses as an
uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rstar2_async.learn import latest_checkpoint

pytestmark = pytest.mark.deepspeed  # each test trains in a DeepSpeed subprocess

SCRIPT = Path(__file__).with_name("_train_script.py")
STEPS = 8


def _run(
    model: Path, root: Path, log: Path, *, crash: str | None = None, kill_after_lines: int | None = None, fails: bool = False
) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    if crash:
        env["LEARNKIT_CRASH"] = crash
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(model), str(root), str(log), str(STEPS)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    if kill_after_lines is not None:
        deadline = time.monotonic() + 300
        while _lines(log) < kill_after_lines and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    out = proc.communicate(timeout=300)[0].decode(errors="replace")
    if kill_after_lines is None and crash is None and not fails:
        assert proc.returncode == 0, out[-3000:]
    return proc.returncode, out


def _lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _records(log: Path) -> dict[int, dict]:
    """Step -> record; a resumed run's record of a step replaces the killed run's."""
    return {r["step"]: r for r in map(json.loads, log.read_text().splitlines())}


@pytest.fixture(scope="module")
def reference(tiny_lm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    """The uninterrupted run."""
    d = tmp_path_factory.mktemp("ref")
    _run(tiny_lm, d / "ckpt", d / "log.jsonl")
    recs = _records(d / "log.jsonl")
    assert sorted(recs) == list(range(STEPS))
    # Retention: only the newest 2 complete checkpoints remain, and nothing partial.
    assert sorted(p.name for p in (d / "ckpt").iterdir()) == [f"step-{STEPS - 1:09d}", f"step-{STEPS:09d}"]  # named by optimizer step
    return recs


def _assert_same(resumed: dict[int, dict], reference: dict[int, dict]) -> None:
    assert sorted(resumed) == list(range(STEPS))
    for step, ref in reference.items():
        got = resumed[step]
        assert got["batch"] == ref["batch"], f"step {step}: a different batch was sampled"
        assert got["mean_reward"] == ref["mean_reward"], f"step {step}"
        assert got.get("loss") == pytest.approx(ref.get("loss"), rel=1e-6, abs=1e-9), f"step {step}: loss"


def test_sigkill_mid_run_resumes_identically(tiny_lm: Path, tmp_path: Path, reference: dict[int, dict]) -> None:
    root, log = tmp_path / "ckpt", tmp_path / "log.jsonl"
    _run(tiny_lm, root, log, kill_after_lines=3)  # killed somewhere in step 3's update or save
    assert latest_checkpoint(root) is not None
    _run(tiny_lm, root, log)
    _assert_same(_records(log), reference)


def test_crash_while_writing_keeps_last_good_checkpoint(
    tiny_lm: Path, tmp_path: Path, reference: dict[int, dict]
) -> None:
    root, log = tmp_path / "ckpt", tmp_path / "log.jsonl"
    # Crash 1: step 2 finishes its update, then dies after DeepSpeed wrote its first file.
    # Crash 2 (resumed run): step 5 dies with every file written, just before the rename.
    for crash_step, where in ((2, "ds"), (5, "publish")):
        assert _run(tiny_lm, root, log, crash=f"{crash_step}:{where}")[0] == 17
        last = latest_checkpoint(root)
        assert last is not None, where
        assert json.loads((last / "state.json").read_text())["state"] == {"next_step": crash_step}, where
        assert list(root.glob(".step-*.tmp")), "the partial checkpoint stays under its temporary name"
    _run(tiny_lm, root, log)
    _assert_same(_records(log), reference)
    assert not list(root.glob(".step-*.tmp"))


@contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[None]:
    """A real small filesystem at ``path``: writes past ``size`` fail with ENOSPC."""
    path.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"a full disk needs a tmpfs mount (root): {mounted.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def test_full_disk_while_checkpointing_loses_nothing(tiny_lm: Path, tmp_path: Path, reference: dict[int, dict]) -> None:
    root, log = tmp_path / "ckpt", tmp_path / "log.jsonl"
    with _tmpfs(root, "2m"):  # one checkpoint (~1.5 MB) fits, the second does not
        rc, out = _run(tiny_lm, root, log, fails=True)
        assert rc != 0 and "CheckpointWriteError: cannot write checkpoint" in out and "MiB free there" in out, out[-2000:]
        last = latest_checkpoint(root)
        assert last is not None and json.loads((last / "state.json").read_text())["state"] == {"next_step": 1}
        # Space freed (the filesystem grown): the run resumes where the last checkpoint left it.
        subprocess.run(["mount", "-o", "remount,size=16m", str(root)], check=True)
        _run(tiny_lm, root, log)
        _assert_same(_records(log), reference)
        assert not list(root.glob(".step-*.tmp"))
