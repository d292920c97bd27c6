"""`rstar2 train`'s process setup, before the trainer starts."""

from __future__ import annotations

import os

import pytest

from rstar2_async.cli.train import share_cpu_cores
from tests.recipe.test_stack import train_config


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({}, "1"),  # vLLM launched on CPU beside the learner: one OpenMP thread each
        ({"server": {"gpu_ids": [[0]]}}, None),  # servers on GPUs: the learner keeps its threads
        ({"inference": {"base_urls": ["http://gpu-node:8000/v1"]}}, None),  # external servers
    ],
)
def test_openmp_threads_are_shared_only_with_cpu_servers_we_launch(
    sections: dict, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # records the real value, restored after the test
    monkeypatch.delenv("OMP_NUM_THREADS")
    share_cpu_cores(train_config(**sections))
    assert os.environ.get("OMP_NUM_THREADS") == expected


def test_a_users_openmp_setting_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    share_cpu_cores(train_config())
    assert os.environ["OMP_NUM_THREADS"] == "4"
