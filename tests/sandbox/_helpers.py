"""Shared bits of the sandbox tests: small pools, waiting on outside state, files to hide."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from sandbox import SandboxConfig

# Small and quick: two workers, tight limits, short grace; warm-up kept tiny.  No spare:
# the tests count a pool's processes, and a spare starts in the background (test_faults
# has the spares' own tests).
FAST = dict(workers=2, spares=0, hang_grace_s=1.0, start_timeout_s=60.0, warmup="", memory_mb=1024)


def config(**overrides: object) -> SandboxConfig:
    return SandboxConfig(**{**FAST, **overrides})  # type: ignore[arg-type]


async def wait_until(predicate, timeout: float = 30.0) -> None:
    """Poll a condition on outside state (processes) that no event can signal."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def project_file() -> str:
    return str(Path(__file__).resolve().parents[2] / "pyproject.toml")


def home_file() -> str | None:
    home = Path(os.path.expanduser("~"))
    try:
        for p in home.iterdir():
            if p.is_file():
                return str(p)
    except OSError:
        pass
    return None
