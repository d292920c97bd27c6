"""Shared fixtures: every async test runs on both asyncio and trio.

Markers say which heavy real part a test needs, so that ``make test-fast`` (``-m
"not vllm and not deepspeed and not browser"``) runs everything else in a few
minutes.  They are set here from what a test uses, not by hand where that can be
read off its fixtures: a test that asks for a vLLM fixture is ``vllm``, one that
asks for the learner's one-process rendezvous is ``deepspeed``.  Tests that start
those parts in another way carry the marker themselves.
"""

from __future__ import annotations

import pytest

VLLM_FIXTURES = frozenset({"vllm_python", "vllm_config", "vllm_server"})
DEEPSPEED_FIXTURES = frozenset({"single_process_env", "sft_policy"})


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    """One intra-op thread in the test process: it shares two cores with the servers
    and learners it starts (and with the other worker in ``make test-fast``), and
    OpenMP threads spinning on a busy core slow a tiny model's step many times over.
    Beside one busy core, the agent tests' policy fit takes 57 s with two threads, 29
    with one."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & VLLM_FIXTURES:
            item.add_marker(pytest.mark.vllm)
        if used & DEEPSPEED_FIXTURES:
            item.add_marker(pytest.mark.deepspeed)
