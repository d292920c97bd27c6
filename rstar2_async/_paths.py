"""Where the shared problem sets live, for every part that reads them."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["child_env", "data_dir"]

_CHECKOUT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """``$RSTAR2_DATA_DIR``, else ``../shared/data`` beside the checkout."""
    return Path(os.environ.get("RSTAR2_DATA_DIR", _CHECKOUT.parent / "shared" / "data"))


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``python -m rstar2_async...`` child: this one, ``extra``
    over it, and a ``PYTHONPATH`` that finds this package even when it is not
    installed (a source checkout), then whatever this process found (a user's
    reward function, tool or shard factory)."""
    env = {**os.environ, **(extra or {})}
    path = (str(_CHECKOUT), *sys.path, env.get("PYTHONPATH"))
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(p for p in path if p))}
