"""The public surface of ``httpgate``; it imports neither ``sandbox``, ``backends`` nor the core."""

from __future__ import annotations

import subprocess
import sys

import httpgate


def test_exports_and_imports() -> None:
    assert httpgate.__all__ == sorted(httpgate.__all__)
    for name in httpgate.__all__:
        assert getattr(httpgate, name) is not None
    code = "import sys, httpgate; print([m for m in sys.modules if m.split('.')[0] in ('rstar2_async', 'sandbox', 'backends')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
