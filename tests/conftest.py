"""Shared fixtures: every async test runs on both asyncio and trio.

Markers say which heavy real part a test needs, so that ``make test-fast`` (``-m
"not vllm and not deepspeed and not browser"``) runs everything else in a few
minutes.  They are set here from what a test uses, not by hand where that can be
read off its fixtures: a test that asks for a vLLM fixture is ``vllm``, one that
asks for the learner's one-process rendezvous is ``deepspeed``.  Tests that start
those parts in another way carry the marker themselves.

``make test`` runs on two xdist workers with ``--dist loadgroup``: every module of
heavy tests is one group, so its module-scoped servers start once, and the modules
that share a session-scoped server or SFT policy are one group each, so those are
made once, not once per worker.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

VLLM_FIXTURES = frozenset({"vllm_python", "vllm_config", "vllm_server"})
DEEPSPEED_FIXTURES = frozenset({"single_process_env", "sft_policy"})
HEAVY_MARKERS = ("vllm", "deepspeed", "browser")
SHARED_FIXTURES = {"vllm_server": "vllm-session-server", "vllm_config": "vllm-session-server", "sft_policy": "sft-policy"}
"""Session fixtures that cost a minute or more: the modules using one run on one worker."""


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & VLLM_FIXTURES:
            item.add_marker(pytest.mark.vllm)
        if used & DEEPSPEED_FIXTURES:
            item.add_marker(pytest.mark.deepspeed)
    _group_heavy_modules(items)


def _group_heavy_modules(items: list[pytest.Item]) -> None:
    """One ``xdist_group`` per module of heavy tests, or per shared session fixture."""
    modules: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        if any(item.get_closest_marker(m) for m in HEAVY_MARKERS):
            modules[item.nodeid.split("::")[0]].append(item)
    for module, heavy in modules.items():
        used = set().union(*(getattr(item, "fixturenames", ()) for item in heavy))
        shared = sorted({SHARED_FIXTURES[f] for f in used & SHARED_FIXTURES.keys()})
        # A module using two shared fixtures would need both groups on one worker: none does.
        assert len(shared) <= 1, f"{module} uses the session fixtures of {shared}: give them one group"
        group = shared[0] if shared else module
        for item in heavy:
            item.add_marker(pytest.mark.xdist_group(group))
