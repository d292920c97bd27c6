"""Token-id client for one vLLM (or other OpenAI-compatible) server: ``/v1/completions``.

Requests carry a token-id prompt; vLLM's extensions ``return_token_ids`` and
``return_tokens_as_token_ids`` bring back the exact sampled ids and their logprobs.
Streamed (``"stream": true``, read in vLLM 0.32's ``completion_stream_generator``),
the answer is ``data: {json}`` server-sent events, then ``data: [DONE]``: each chunk
has one choice with the new tokens' ``token_ids`` and ``logprobs`` (``tokens`` as
``"token_id:N"``, ``token_logprobs``), its ``finish_reason`` on the last (``null``
before); the first chunk also repeats the prompt's ids (``prompt_token_ids``, left
undecoded here).  A failure while streaming comes as a chunk ``{"error": {...}}``
before ``[DONE]``.  vLLM does not put the weight version on completions; a server
that does (``weight_version``, as the test doubles) has it read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Generic, TypeVar, final

import httpx
import msgspec

from ._errors import BadResponse, ServerUnavailable
from ._progress import Progress
from ._retry import RetryPolicy
from ._token_client import FINISH_REASONS, CompletionClient, PartReader
from ._token_ids import json_ids
from ._types import Completion, SamplingParams
from ._vllm import parse_vllm_weight_version

__all__ = ["STREAM_INTERVAL", "TokenClient"]

STREAM_INTERVAL: Final = 64
"""Tokens per streamed chunk (vLLM's per-request ``stream_interval``; the first chunk
comes at once with the first token).  Each chunk costs the client ~60-75 us (its
own read, h11's chunk framing, the event's decode): a 240-token turn cost 1,528 us
at 16 tokens a chunk, 947 us at 64, and 502 us read whole
(``benchmarks/rollout_overhead.py``, ``turn_cpu_us_*``).  Progress is still seen
every ~2 s of a sequence's decoding at 30 tokens/s, far inside ``stall_timeout_s``,
and a failover regenerates at most 63 tokens it had not received."""

_LogprobT = TypeVar("_LogprobT", float, float | None)


class _Logprobs(msgspec.Struct, Generic[_LogprobT]):
    token_logprobs: list[_LogprobT] = []
    tokens: msgspec.Raw = msgspec.Raw(b"[]")
    """``"token_id:123"`` strings, read only from a server that sends no ``token_ids``
    (kept raw: decoding 240 strings nobody reads was a third of the decode)."""


class _Choice(msgspec.Struct, Generic[_LogprobT]):
    token_ids: list[int] | None = None
    logprobs: _Logprobs[_LogprobT] | None = None
    finish_reason: str | None = None


class _Response(msgspec.Struct, Generic[_LogprobT]):
    """A whole answer, or one streamed chunk (the same shape; the last chunk of
    usage has no choices)."""

    choices: list[_Choice[_LogprobT]] = []
    weight_version: int | str | None = None
    """Ours as an int, or as vLLM keeps versions: a string (``"default"`` is not ours)."""
    error: Any = None
    """A streamed answer's failure (``{"message", ...}``)."""


_decoder: Final = msgspec.json.Decoder(_Response[float])
_nullable_decoder: Final = msgspec.json.Decoder(_Response[float | None])
"""For an answer with a ``null`` logprob, which the first decoder refuses: the common
answer then needs no pass of its own to replace them."""
_tokens_decoder: Final = msgspec.json.Decoder(list[str])
_encoder: Final = msgspec.json.Encoder()


def _decode(content: bytes | memoryview, where: str) -> tuple[_Choice[Any] | None, _Response[Any], bool]:
    """The answer, its choice (None: no choice, e.g. a usage chunk), and whether its
    logprobs may hold ``null``."""
    parsed: _Response[float] | _Response[float | None]
    nullable = False
    try:
        try:
            parsed = _decoder.decode(content)
        except msgspec.ValidationError:  # a null logprob (or a bad answer: decoded again to tell)
            parsed, nullable = _nullable_decoder.decode(content), True
    except msgspec.DecodeError as exc:
        raise BadResponse(f"{where}: undecodable completion: {bytes(content[:200])!r}") from exc
    if parsed.error is not None:
        raise ServerUnavailable(f"{where}: the server failed the generation: {str(parsed.error)[:300]}")
    return (parsed.choices[0] if parsed.choices else None), parsed, nullable


def _tokens(choice: _Choice[Any], where: str, nullable: bool) -> tuple[list[int], list[float]]:
    lp = choice.logprobs
    ids = choice.token_ids
    if ids is None:  # servers without return_token_ids: "token_id:123" strings
        try:
            ids = [int(t.removeprefix("token_id:")) for t in _tokens_decoder.decode(lp.tokens if lp else b"[]")]
        except (msgspec.DecodeError, ValueError) as exc:
            raise BadResponse(f"{where}: no token ids in the completion") from exc
    logprobs = lp.token_logprobs if lp else []
    if nullable:
        logprobs = [0.0 if x is None else x for x in logprobs]
    return ids, logprobs


def _version(value: int | str | None) -> int | None:
    return parse_vllm_weight_version(value) if isinstance(value, str) else value


@final
class _Reader(PartReader):
    __slots__ = ()

    def event(self, payload: memoryview) -> None:
        choice, parsed, nullable = _decode(payload, self.where)
        if parsed.weight_version is not None:
            self.saw_version(_version(parsed.weight_version))
        if choice is not None:
            self.tokens(*_tokens(choice, self.where, nullable))
            if choice.finish_reason is not None:
                self.finish = choice.finish_reason


@final
class TokenClient(CompletionClient):
    """One OpenAI-compatible server (vLLM), token ids in and out over ``/v1/completions``.

    Args:
        base_url: the server's base URL ending in ``/v1``.
        model: model name sent with each request.
        api_key: bearer token, if the server wants one.
        timeout: httpx timeouts (connect / read / write / pool kept separate).
        max_connections: size of the connection pool.
        retry: backoff policy for connection errors, timeouts and 5xx answers.
        transport: an httpx transport (tests plug in a mock here).
        stream: stream each answer (default; see :class:`CompletionClient`).
    """

    generate_path = "/completions"

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        timeout: httpx.Timeout | None = None,
        max_connections: int = 4096,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        stream: bool = True,
    ) -> None:
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        super().__init__(
            base_url.rstrip("/"), model=model, headers=headers, timeout=timeout,
            max_connections=max_connections, retry=retry, transport=transport, stream=stream,
        )  # fmt: skip

    def _body(self, prompt: Sequence[int], max_tokens: int, sampling: SamplingParams) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": json_ids(prompt),  # a TokenIds' JSON is spliced in, not encoded again
            "max_tokens": max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
        }
        if self.stream:
            body["stream"] = True
            body["stream_interval"] = STREAM_INTERVAL
        if sampling.top_k > 0:
            body["top_k"] = sampling.top_k
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        return _encoder.encode(body)

    def _reader(self, progress: Progress, sent_version: int) -> PartReader:
        return _Reader(self._where, progress, sent_version)

    def _parse(self, content: bytes, sent_version: int) -> Completion:
        choice, parsed, nullable = _decode(content, self._where)
        if choice is None:
            raise BadResponse(f"{self._where}: undecodable completion (no choice): {content[:200]!r}")
        ids, logprobs = _tokens(choice, self._where, nullable)
        if len(logprobs) != len(ids):
            raise BadResponse(f"{self._where}: {len(ids)} token ids but {len(logprobs)} logprobs")
        version = _version(parsed.weight_version)
        return Completion(
            token_ids=ids,
            logprobs=logprobs,
            finish_reason=FINISH_REASONS.get(choice.finish_reason, "stop"),
            weight_version=sent_version if version is None else version,
        )
