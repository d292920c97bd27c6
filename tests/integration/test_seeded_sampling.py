"""Seeded sampling on the real vLLM server: the same seed samples the same tokens,
one request at a time and a whole seeded rollout, run twice concurrently; another
seed samples others.  (vLLM draws a seeded request's noise from its own generator,
whatever else is in the batch.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from backends import SamplingParams, TokenClient
from backends._launcher import VLLMServer
from rstar2_async.config import RolloutConfig, SamplingConfig
from rstar2_async.rollout import HFChatTokenizer, RolloutEngine
from rstar2_async.types import Problem
from rstar2_async.testing import FakeSandbox

pytestmark = [pytest.mark.vllm, pytest.mark.anyio]

HOT = 1.0  # the tiny random model at temperature 1: every draw is a real draw


async def test_the_same_seed_samples_the_same_tokens(vllm_server: VLLMServer, tiny_model_dir: Path) -> None:
    tok = HFChatTokenizer.from_pretrained(tiny_model_dir)
    prompt = tok.encode_prompt([{"role": "user", "content": "What is 6 * 7?"}])
    async with TokenClient(vllm_server.base_url + "/v1", model=vllm_server.model) as client:

        async def sample(seed: int) -> list[int]:
            return (await client.generate(prompt, max_tokens=32, sampling=SamplingParams(temperature=HOT, seed=seed))).token_ids

        first, again, other = await sample(11), await sample(11), await sample(12)
    assert first == again
    assert first != other


async def test_a_seeded_rollout_run_twice_samples_the_same_trajectories(vllm_server: VLLMServer, tiny_model_dir: Path) -> None:
    problems = [Problem(id=f"p{i}", problem=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(3)]
    config = RolloutConfig(max_turns=2, max_response_tokens=32, max_in_flight=6)
    tok = HFChatTokenizer.from_pretrained(tiny_model_dir)
    runs = []
    async with TokenClient(vllm_server.base_url + "/v1", model=vllm_server.model) as client:
        engine = RolloutEngine(backend=client, sandbox=FakeSandbox(), config=config, tokenizer=tok)  # no tool runs
        for seed in (5, 5, 6):  # all 6 trajectories of a run at once, in whatever order they reach the server
            groups = await engine.run(problems, n=2, sampling=SamplingConfig(temperature=HOT, seed=seed))
            runs.append([t.response_ids for g in groups for t in g.trajectories])
    assert runs[0] == runs[1]
    assert len({tuple(ids) for ids in runs[0]}) == 6  # every trajectory its own seed
    assert runs[2] != runs[0]
