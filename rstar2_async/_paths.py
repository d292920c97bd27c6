"""Where the shared problem sets live, for every part that reads them."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir"]

_CHECKOUT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """``$RSTAR2_DATA_DIR``, else ``../shared/data`` beside the checkout."""
    return Path(os.environ.get("RSTAR2_DATA_DIR", _CHECKOUT.parent / "shared" / "data"))
