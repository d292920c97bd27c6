"""The public surface of ``backends``: every exported name exists, and nothing
from ``rstar2_async`` or ``sandbox`` is imported, nor the OpenAI SDK until a
ChatClient is built."""

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


def test_the_openai_sdk_is_imported_only_when_a_chat_client_is_built() -> None:
    code = (
        "import sys, backends; before = 'openai' in sys.modules; "
        "backends.ChatClient.from_url('http://127.0.0.1:9/v1', model='m'); print(before, 'openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
