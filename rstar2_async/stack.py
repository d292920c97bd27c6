"""Assembling a rollout engine from configuration: servers, sandbox, grader.

One async context manager owns every resource it starts (vLLM processes, sandbox
workers, grading workers, HTTP pools) and stops them all on exit, cancellation
included.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
import msgspec

from backends import ChatClient, RetryPolicy, TokenClient
from backends._launcher import VLLMServer, VLLMServerConfig, launch_vllm
from sandbox import SandboxConfig, SandboxPool

from .chat import HFChatTokenizer
from .config import InferenceConfig, RolloutConfig
from .engine import RolloutEngine
from .reward import Grader


class LocalServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A vLLM server started for a model directory (``--model`` runs)."""

    max_model_len: int = 4096
    """Prompt + response limit of the server, in tokens."""
    dtype: str = "float32"
    """float32 on CPU; bfloat16 on GPUs."""
    kv_cache_gib: float = 1.0
    """CPU KV-cache size in GiB (ignored on GPUs)."""
    extra_args: list[str] = []
    """Further ``vllm serve`` arguments."""


class EvalConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The TOML ``rstar2 eval --config`` reads; every section is optional."""

    rollout: RolloutConfig = msgspec.field(default_factory=RolloutConfig)
    inference: InferenceConfig = msgspec.field(default_factory=InferenceConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    server: LocalServerConfig = msgspec.field(default_factory=LocalServerConfig)


def token_client(url: str, inference: InferenceConfig) -> TokenClient:
    return TokenClient(
        url,
        model=inference.model,
        api_key=os.environ.get(inference.api_key_env),
        timeout=httpx.Timeout(
            inference.read_timeout_s, connect=inference.connect_timeout_s, pool=inference.pool_timeout_s
        ),
        max_connections=inference.max_connections,
        retry=RetryPolicy(
            max_retries=inference.max_retries, initial_s=inference.backoff_initial_s, max_s=inference.backoff_max_s
        ),
    )


@asynccontextmanager
async def rollout_stack(
    *,
    rollout: RolloutConfig,
    inference: InferenceConfig,
    sandbox: SandboxConfig,
    model_dir: Path | None = None,
    tokenizer_dir: Path | None = None,
    local_server: LocalServerConfig | None = None,
    grader_workers: int = 2,
    log_dir: Path | None = None,
) -> AsyncIterator[tuple[RolloutEngine, VLLMServer | None]]:
    """Start what a rollout needs and yield the engine (and the local server, if any).

    - ``model_dir`` given: a vLLM server is launched on it; token mode, with the
      model's own tokenizer.
    - ``inference.mode == "tokens"``: the first of ``inference.base_urls``, with the
      tokenizer from ``tokenizer_dir``.
    - ``inference.mode == "chat"``: the OpenAI SDK against ``inference.base_urls[0]``.

    Raises:
        ValueError: token mode against an endpoint without ``tokenizer_dir``.
        backends.LaunchError: the local server failed to start.
        sandbox.SandboxBroken: sandbox workers could not start (e.g. no bubblewrap).
    """
    async with AsyncExitStack() as stack:
        server: VLLMServer | None = None
        if model_dir is not None:
            local = local_server or LocalServerConfig()
            server = await stack.enter_async_context(
                launch_vllm(
                    VLLMServerConfig(
                        model=str(model_dir),
                        served_model_name=inference.model,
                        max_model_len=local.max_model_len,
                        dtype=local.dtype,
                        kv_cache_gib=local.kv_cache_gib,
                        extra_args=tuple(local.extra_args),
                        log_path=str(log_dir / "vllm.log") if log_dir else None,
                    )
                )
            )
            tokenizer_dir = model_dir
            inference = msgspec.structs.replace(inference, base_urls=[server.base_url + "/v1"], mode="tokens")
        tokenizer = None
        if inference.mode == "tokens":
            if tokenizer_dir is None:
                raise ValueError("inference.mode = \"tokens\" needs the model's tokenizer: pass --tokenizer DIR (or use chat mode)")
            tokenizer = HFChatTokenizer.from_pretrained(tokenizer_dir)
            backend = await stack.enter_async_context(token_client(inference.base_urls[0], inference))
        else:
            backend = await stack.enter_async_context(
                ChatClient.from_url(
                    inference.base_urls[0],
                    model=inference.model,
                    api_key=os.environ.get(inference.api_key_env),
                    max_retries=inference.max_retries,
                )
            )
        pool = await stack.enter_async_context(SandboxPool(sandbox))
        grader = await stack.enter_async_context(Grader(workers=grader_workers))
        engine = RolloutEngine(backend=backend, sandbox=pool, config=rollout, tokenizer=tokenizer, scorer=grader)
        yield engine, server
