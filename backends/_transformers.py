"""In-process inference on ``transformers``: a token backend that is its own weight admin,
for tests, laptops and ``rstar2 eval --engine transformers``, where starting vLLM
(30-50 s) costs more than the run.  Exact rather than fast:

- Token-in/token-out as vLLM answers: the sampled ids (EOS included on ``stop``), each
  with its *raw* logprob (log-softmax at temperature 1, before top-k / top-p, in float32:
  vLLM's ``raw_logprobs``).  Greedy output equals ``model.generate(do_sample=False)``.
- Requests step token by token in worker threads behind one ``CapacityLimiter(1)`` (the
  model is not thread-safe): concurrent ones interleave fairly, a cancelled one stops
  after its current step.  No batching: padding changes float results, and a greedy
  request must give the same tokens whatever runs beside it.

Not covered: stop strings, ``n > 1``, alternative logprobs, text (no tokenizer is loaded),
prefix caching.  torch and transformers are imported lazily: ``import backends`` stays light.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Self, final

import anyio
import msgspec

from ._checked_weights import load_checked_weights
from ._dispatch import ServerLoad
from ._errors import BackendClosed, LaunchError, RequestRejected, ServerError
from ._protocols import PauseMode
from ._token_client import State
from ._types import Completion, FinishReason, SamplingParams
from ._vllm import vllm_weight_version

__all__ = ["CAPACITY_TOKENS", "TransformersBackend", "TransformersStatistics"]

CAPACITY_TOKENS: Final = 1 << 30
"""The KV capacity :meth:`TransformersBackend.load` reports: each request owns its cache,
bounded by memory, not a pool, so a dispatcher must never hold a request back for it."""

Dtype = Literal["float32", "bfloat16", "float16"]


class TransformersStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one :class:`TransformersBackend` (stays in-process)."""

    requests: int  # generations that returned a completion (any finish reason)
    generated_tokens: int  # sampled by all generations, cancelled ones included
    in_flight: int  # generations admitted and not yet ended
    waiting: int  # generations held back by a pause or a weight load
    paused: bool
    weight_version: int  # what completions are stamped with (0 until one is set)


@dataclass(slots=True)
class _Request:
    """One generation's torch state, owned by its ``generate`` call (its first step makes it)."""

    prompt: list[int]
    sampling: SamplingParams
    cache: Any = None
    generator: Any = None
    next_input: Any = None


@final
class TransformersBackend:
    """A causal LM from a Hugging Face directory, run in this process; both a
    :class:`~backends.TokenBackend` and a :class:`~backends.WeightAdmin`.

    Args:
        model_dir: what ``AutoModelForCausalLM.from_pretrained`` loads (e.g. an export).
        device: ``"cpu"``, ``"cuda:0"``...
        dtype: of weights and activations (logprobs are computed in float32 anyway).
        max_model_len: the context, prompt plus generation: ``max_tokens`` is
            clamped to what it leaves after the prompt, as the token clients clamp
            it for a server (default: the config's ``max_position_embeddings``, if any).

    Resource handling:
        ``async with backend`` loads the model (in a worker thread) and drops it on
        exit.  No background task: all work runs in the callers' tasks.  Generations
        still running at close raise :class:`BackendClosed` after their current step.

    Error handling:
        ``RuntimeError`` for lifecycle misuse; :class:`BackendClosed` after close;
        :class:`RequestRejected` (status 400, as an HTTP engine answers) for a request
        or weight directory no retry can fix; :class:`ServerError` (chained) when torch
        fails underneath (out of memory); :class:`LaunchError` if the model cannot load.
    """

    engine: Final = "transformers"
    native_wait: Final = True
    """``pause("wait")`` returns once every in-flight generation has finished."""

    def __init__(
        self, model_dir: str | Path, *, device: str = "cpu", dtype: Dtype = "float32", max_model_len: int | None = None
    ) -> None:
        self.model_dir, self.device, self.dtype, self.max_model_len = Path(model_dir), device, dtype, max_model_len
        self._state = State.UNOPENED
        self._model: Any = None  # with _eos, _vocab and _cache_kw, set by _load_model
        self._version, self._versioned, self._paused = 0, False, False
        self._holds = 0  # the pause (at most one) plus the weight loads in progress
        self._abort_epoch = 0  # bumped by pause("abort"): generations admitted before it end
        self._running = self._waiting = self._requests = self._generated = self._kv_tokens = 0

    async def __aenter__(self) -> Self:
        """Load the model; if that fails, :class:`LaunchError` (and it stays UNOPENED)."""
        if self._state is not State.UNOPENED:
            raise RuntimeError(f"cannot open a TransformersBackend that is {self._state.name}")
        self._limiter = anyio.CapacityLimiter(1)
        self._released = anyio.Event()  # set while nothing holds generations back
        self._idle = anyio.Event()  # set while no generation is in flight
        self._released.set()
        self._idle.set()
        try:
            self._model = await anyio.to_thread.run_sync(self._load_model)
        except Exception as exc:  # whatever from_pretrained raises: one error at our edge
            raise LaunchError(f"{self.model_dir}: cannot load the model: {type(exc).__name__}: {exc}") from exc
        self._state = State.OPEN
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._state = State.CLOSED
        self._released.set()  # held generations wake up and raise BackendClosed
        self._model = None  # a step still running holds its own reference until it ends
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def _check_open(self, operation: str) -> None:
        if self._state is State.CLOSED:
            raise BackendClosed(f"{operation} on a closed TransformersBackend")
        if self._state is not State.OPEN:
            raise RuntimeError(f"{operation} on a TransformersBackend that is {self._state.name} (use `async with`)")

    def _load_model(self) -> Any:  # in a worker thread
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=getattr(torch, self.dtype)).to(self.device)
        eos = (model.generation_config.eos_token_id, model.config.eos_token_id)  # int, list or None each
        self._eos = frozenset(i for ids in eos for i in ([ids] if isinstance(ids, int) else ids or ()))
        self._vocab = model.get_input_embeddings().num_embeddings
        if self.max_model_len is None:
            self.max_model_len = getattr(model.config, "max_position_embeddings", None)
        # transformers 5 renamed the cache argument (the old name warns on every call).
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        return model.eval()

    async def generate(
        self, prompt_ids: Sequence[int], *, max_tokens: int, sampling: SamplingParams, session: Hashable = None
    ) -> Completion:
        """Generate up to ``max_tokens`` tokens after ``prompt_ids`` (``session`` is
        ignored: one engine, no prefix cache).

        Waits while paused or loading weights.  Ends with ``stop`` at an EOS id of the
        config or generation config (included), ``length`` at ``max_tokens``, or
        ``abort`` (the tokens so far, maybe none) at ``pause("abort")``; a prompt that
        fills ``max_model_len`` gets no tokens and ``length``.  The weights
        never change during a generation; it carries the version set when it was
        admitted.  ``sampling.seed`` makes it reproducible (a ``torch.Generator`` per
        request: concurrent ones do not disturb each other).

        Cancellation: ends after the forward in progress (one token, or the prefill),
        leaving the backend as it was.

        Raises:
            RequestRejected: empty prompt, ids outside the vocabulary, ``max_tokens``
                < 1, or sampling values vLLM refuses.
            BackendClosed: closed before or during the call.
            ServerError: torch failed (e.g. out of memory).
        """
        self._check_open("generate")
        prompt = list(prompt_ids)  # the caller's list is only lent
        self._validate(prompt, max_tokens, sampling)
        if self.max_model_len is not None:
            max_tokens = min(max_tokens, self.max_model_len - len(prompt))
        self._waiting += 1
        try:
            while self._holds:
                await self._released.wait()
                self._check_open("generate")
        finally:
            self._waiting -= 1
        epoch, version = self._abort_epoch, self._version
        if self._running == 0:
            self._idle = anyio.Event()
        self._running += 1
        self._kv_tokens += len(prompt)
        request = _Request(prompt, sampling)
        tokens: list[int] = []
        logprobs: list[float] = []
        finish: FinishReason = "length"
        try:
            while len(tokens) < max_tokens:
                self._check_open("generate")
                if self._abort_epoch != epoch:
                    finish = "abort"
                    break
                token, logprob = await self._in_thread(_step, self._model, request, self._cache_kw)
                tokens.append(token)
                logprobs.append(logprob)
                self._generated += 1
                self._kv_tokens += 1
                if token in self._eos:
                    finish = "stop"
                    break
        finally:
            self._running -= 1
            self._kv_tokens -= len(prompt) + len(tokens)
            if self._running == 0:
                self._idle.set()
        self._requests += 1
        return Completion(tokens, logprobs, finish, weight_version=version)

    def _validate(self, prompt: list[int], max_tokens: int, s: SamplingParams) -> None:
        for wrong, problem in (
            (not prompt, "empty prompt"),
            (not all(isinstance(t, int) and 0 <= t < self._vocab for t in prompt), f"ids outside [0, {self._vocab})"),
            (max_tokens < 1, f"max_tokens must be >= 1, got {max_tokens}"),
            (s.temperature < 0 or not 0 < s.top_p <= 1 or (s.top_k != -1 and s.top_k < 1), f"bad sampling: {s}"),
        ):
            if wrong:
                raise RequestRejected(f"TransformersBackend: {problem}", 400)

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        # One model use at a time; never abandoned on cancellation, so never two at once.
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        except RuntimeError as exc:  # torch's errors, OOM included, are RuntimeErrors
            raise ServerError(f"TransformersBackend: {type(exc).__name__}: {exc}") from exc

    async def pause(self, mode: PauseMode = "wait") -> None:
        """Hold new generations until :meth:`resume`; return once none is in flight:
        ``wait`` lets them finish, ``abort`` ends them at their next token with
        ``finish_reason="abort"``.  Cancelling only stops the waiting: the pause holds."""
        self._check_open("pause")
        if mode not in ("wait", "abort"):
            raise ValueError(f"pause mode: expected 'wait' or 'abort' (no 'keep' in process), got {mode!r}")
        if not self._paused:
            self._paused = True
            self._hold()
        if mode == "abort":
            self._abort_epoch += 1
        await self._idle.wait()

    async def resume(self) -> None:
        """Admit the held generations again (a no-op when not paused)."""
        self._check_open("resume")
        if self._paused:
            self._paused = False
            self._unhold()

    async def load_weights_from_disk(self, path: str) -> None:
        """Replace every weight in place from a safetensors directory (``model.safetensors``
        or the shards of ``model.safetensors.index.json``, the model's names and shapes:
        the learner's export), cast to the model's dtype.  Holds new generations and
        waits for those in flight to finish, so no completion mixes two sets of weights.
        Cancellation: atomic (once the copy has started, it finishes).

        Raises:
            RequestRejected: missing or unreadable files, names or shapes that do not
                match (missing, unexpected); checked before anything is copied: the
                old weights stay.
            ServerError: the copy itself failed (the weights may then be mixed).
        """
        self._check_open("load_weights_from_disk")
        self._hold()
        try:
            await self._idle.wait()
            self._check_open("load_weights_from_disk")
            await self._in_thread(load_checked_weights, self._model, Path(path))
        finally:
            self._unhold()

    async def reset_prefix_cache(self) -> None:
        """A no-op: nothing is cached across requests (each owns its KV cache)."""
        self._check_open("reset_prefix_cache")

    async def set_weight_version(self, version: int | str) -> None:
        """Stamp ``version`` (an int, or its decimal string) on the generations admitted
        from now on.  ``ValueError`` for anything else."""
        self._check_open("set_weight_version")
        self._version, self._versioned = int(vllm_weight_version(version)), True

    async def weight_version(self) -> str:
        """The version's decimal string; ``"default"`` before one was set (as vLLM)."""
        self._check_open("weight_version")
        return str(self._version) if self._versioned else "default"

    async def health(self) -> bool:
        """True while open (the model is loaded); never raises."""
        return self._state is State.OPEN

    async def load(self) -> ServerLoad:
        """Running and held generations, the tokens their caches hold, :data:`CAPACITY_TOKENS`."""
        self._check_open("load")
        return ServerLoad(capacity_tokens=CAPACITY_TOKENS, used_tokens=self._kv_tokens, running=self._running,
                          waiting=self._waiting)  # fmt: skip

    def statistics(self) -> TransformersStatistics:
        """A snapshot (in any state; never raises)."""
        return TransformersStatistics(requests=self._requests, generated_tokens=self._generated, in_flight=self._running,
                                      waiting=self._waiting, paused=self._paused, weight_version=self._version)  # fmt: skip

    def _hold(self) -> None:
        if self._holds == 0:
            self._released = anyio.Event()
        self._holds += 1

    def _unhold(self) -> None:
        self._holds -= 1
        if self._holds == 0:
            self._released.set()


# -- in the worker thread ---------------------------------------------------------------


def _step(model: Any, request: _Request, cache_kw: str) -> tuple[int, float]:
    """One forward (the prompt's prefill first, then one token each) and one sample."""
    import torch
    from transformers import DynamicCache

    with torch.inference_mode():
        if request.next_input is None:
            device = model.get_input_embeddings().weight.device
            request.next_input = torch.tensor([request.prompt], device=device)
            request.cache, request.generator = DynamicCache(), torch.Generator(device=device)
            if request.sampling.seed is None:
                request.generator.seed()  # nondeterministic; the global RNG stays untouched
            else:
                request.generator.manual_seed(request.sampling.seed)
        out = model(input_ids=request.next_input, use_cache=True, logits_to_keep=1, **{cache_kw: request.cache})
        logits = out.logits[0, -1].float()  # [vocab]
        token = _sample(logits, request.sampling, request.generator)
        request.next_input = torch.tensor([[token]], device=logits.device)
        return token, torch.log_softmax(logits, dim=-1)[token].item()


def _sample(logits: Any, sampling: SamplingParams, generator: Any) -> int:
    """vLLM's order: temperature (0: argmax), then top-k, then top-p."""
    import torch

    if sampling.temperature == 0:
        return int(logits.argmax())
    scores = logits / sampling.temperature
    if 0 < sampling.top_k < scores.numel():
        scores = scores.masked_fill(scores < torch.topk(scores, sampling.top_k).values[-1], -math.inf)
    if sampling.top_p < 1.0:
        sorted_scores, order = scores.sort(descending=True)
        probs = sorted_scores.softmax(-1)
        # Keep the smallest set of likeliest tokens holding top_p of the mass (never empty).
        scores = scores.index_fill(0, order[probs.cumsum(-1) - probs > sampling.top_p], -math.inf)
    return int(torch.multinomial(scores.softmax(-1), 1, generator=generator))
