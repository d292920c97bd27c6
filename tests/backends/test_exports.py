"""The public surface of ``backends``: every exported name exists, and nothing
from ``rstar2_async`` or ``sandbox`` is imported."""

from __future__ import annotations

import subprocess
import sys

import backends


def test_all_names_exist_and_are_sorted_groups() -> None:
    for name in backends.__all__:
        assert hasattr(backends, name), name
    for name in ("ServerPool", "Dispatcher", "WeightSync", "DiskTransport", "BroadcastTransport", "Fleet",
                 "FleetConfig", "VLLMAdmin", "SGLangAdmin", "SGLangTokenClient", "WeightSyncError"):
        assert name in backends.__all__


def test_backends_never_imports_the_core_or_the_sandbox() -> None:
    code = "import sys, backends; print([m for m in sys.modules if m.split('.')[0] in ('rstar2_async', 'sandbox')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
