"""Token-id client for one OpenAI-compatible server (the training hot path).

Requests go to ``/v1/completions`` with a token-id prompt; vLLM's extensions
``return_token_ids`` and ``return_tokens_as_token_ids`` bring back the exact sampled
ids and their logprobs.  Bodies are encoded and decoded with msgspec, typed
decoders built once: this path runs tens of thousands of times per step.

The client is layered: :meth:`CompletionClient.generate` resumes aborted
generations, ``_send`` retries, ``_request`` does one HTTP exchange and translates
httpx's exceptions into :mod:`backends._errors` at the edge.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Sequence
from types import TracebackType
from typing import Any, Final, Generic, Self, TypeVar, final

import anyio
import httpx
import msgspec

from httpgate import Http11Transport, transport_for

from ._ask_once import AskOnce
from ._errors import BackendClosed, BadResponse, RequestRejected, ServerUnavailable
from ._retry import RetryPolicy
from ._token_ids import json_ids
from ._types import Completion, FinishReason, SamplingParams
from ._vllm import parse_vllm_weight_version

MAX_RESUMES: Final = 16
"""Aborted generations resumed per call before giving up with ``abort``: a server that
aborts every request (stuck paused, shutting down) must not spin a trajectory forever."""


_LogprobT = TypeVar("_LogprobT", float, float | None)


class _Logprobs(msgspec.Struct, Generic[_LogprobT]):
    token_logprobs: list[_LogprobT] = []
    tokens: msgspec.Raw = msgspec.Raw(b"[]")
    """``"token_id:123"`` strings, read only from a server that sends no ``token_ids``
    (kept raw: decoding 240 strings nobody reads was a third of the decode)."""


class _Choice(msgspec.Struct, Generic[_LogprobT]):
    text: str = ""
    token_ids: list[int] | None = None
    logprobs: _Logprobs[_LogprobT] | None = None
    finish_reason: str | None = None


class _ModelCard(msgspec.Struct):
    id: str = ""
    max_model_len: int | None = None
    """vLLM's (and SGLang's) context length: prompt plus generated tokens."""


class _Models(msgspec.Struct):
    data: list[_ModelCard] = []


class _Response(msgspec.Struct, Generic[_LogprobT]):
    choices: list[_Choice[_LogprobT]]
    weight_version: int | str | None = None
    """Ours as an int, or as vLLM keeps versions: a string (``"default"`` is not ours)."""


_decoder: Final = msgspec.json.Decoder(_Response[float])
_nullable_decoder: Final = msgspec.json.Decoder(_Response[float | None])
"""For an answer with a ``null`` logprob, which the first decoder refuses: the common
answer then needs no pass of its own to replace them."""
_tokens_decoder: Final = msgspec.json.Decoder(list[str])
_models_decoder: Final = msgspec.json.Decoder(_Models)
_encoder: Final = msgspec.json.Encoder()
_FINISH: Final[dict[str | None, FinishReason]] = {"stop": "stop", "length": "length", "abort": "abort", None: "abort"}


class TokenClientStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a token client's counters (its whole life)."""

    generations: int
    """``generate`` calls that returned a completion."""
    resumed: int
    """Aborted parts that were resumed from their tokens (a paused server, most
    often a weight sync in ``abort`` mode cutting a turn short)."""
    interrupted: int = 0
    """Generations a pause interrupted: cut short and resumed (``abort``), or frozen
    on the server while a weight sync changed the version (``keep``)."""


class State(enum.Enum):
    UNOPENED = 1
    OPEN = 2
    CLOSED = 3


class CompletionClient:
    """What every token-id client shares: the connection pool and its lifecycle, the
    resumption of aborted generations, and retries.  A subclass says how one request
    is made and read (``_request``); :class:`TokenClient` speaks vLLM's completions,
    :class:`backends._sglang.SGLangTokenClient` SGLang's ``/generate``.

    Use as ``async with client``; the client owns its connection pool and closes it
    on exit.

    Each request's ``max_tokens`` is clamped to what the server's context leaves
    after the prompt: the context length (``max_model_len`` on ``GET /v1/models``) is
    learnt once, on the first generation.  A server that does not report it is
    sent ``max_tokens`` unchanged.
    """

    models_path: str = "/models"
    """Where the server lists its models, relative to ``base_url``."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        max_connections: int = 4096,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.retry = retry or RetryPolicy()
        self.weight_version = 0
        """Stamped on answers without a version to requests sent from now on; the weight
        sync sets it after loading new weights and before resuming the server."""
        timeout = timeout or httpx.Timeout(3600.0, connect=10.0, pool=60.0)
        transport = transport or transport_for(base_url, timeout=timeout, max_connections=max_connections)
        # The client owns the transport's lifecycle; the hot path (_post) calls the
        # transport directly.
        self._transport = transport
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport, trust_env=False
        )
        self._raw_headers = list(httpx.Headers(headers).raw)
        self._extensions = {"timeout": timeout.as_dict()}
        self._urls: dict[str, httpx.URL] = {}
        self._state = State.UNOPENED
        self._generations = self._resumed = self._interrupted = 0
        self._context = AskOnce(self._ask_context_length, None)

    async def __aenter__(self) -> Self:
        if self._state is not State.UNOPENED:
            raise RuntimeError(f"cannot open a {type(self).__name__} that is {self._state.name}")
        await self._http.__aenter__()
        self._state = State.OPEN
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._state = State.CLOSED
        with anyio.CancelScope(shield=True):
            await self._http.__aexit__(exc_type, exc, tb)

    async def generate(
        self, prompt_ids: Sequence[int], *, max_tokens: int, sampling: SamplingParams, session: Hashable = None
    ) -> Completion:
        """Generate up to ``max_tokens`` tokens after ``prompt_ids``.  ``session`` is
        accepted for interface compatibility with server pools and ignored.

        An aborted generation (server paused with abort, preempted, restarting) is
        resumed from the tokens it produced, up to :data:`MAX_RESUMES` times; the
        result then reads as one generation.

        ``max_tokens`` is clamped to the server's context (:meth:`context_length`)
        minus the prompt; a prompt that fills the context gets no tokens and
        ``finish_reason == "length"``, without a request.

        Raises:
            BackendClosed: the client was closed.
            RequestRejected: the server answered 4xx (a bad request; not retried).
            ServerUnavailable: connection errors, timeouts or 5xx outlasted the retries.
            BadResponse: the answer did not decode, after the retries.

        Cancellation: safe at any point and never delayed; the HTTP request is
        abandoned and its connection closed (see :class:`httpgate.Http11Transport`).
        """
        token_ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        finish: FinishReason = "abort"
        interrupted = False
        context = self._context.value if self._context.known else await self._context.get()  # the hot path: no await
        for _ in range(MAX_RESUMES + 1):
            remaining = max_tokens - len(token_ids)
            if context is not None:  # vLLM refuses a request whose prompt + max_tokens exceeds it
                remaining = min(remaining, context - len(prompt_ids) - len(token_ids))
            if remaining <= 0:
                finish = "length"
                break
            prompt = list(prompt_ids) + token_ids if token_ids else prompt_ids
            sent = self.weight_version
            part = await self._send(prompt, remaining, sampling)
            interrupted |= self.weight_version != sent  # a ``keep`` sync froze it meanwhile
            if versions:  # a resumed part: new lists, the part's are not ours to extend
                token_ids, logprobs = token_ids + part.token_ids, logprobs + part.logprobs
            else:  # the first part's lists, fresh from its answer, are the result's (no copy)
                token_ids, logprobs = part.token_ids, part.logprobs
            versions.append(part.weight_version)
            finish = part.finish_reason
            if finish != "abort":
                break
            self._resumed += 1
            interrupted = True
        self._generations += 1
        self._interrupted += interrupted
        version = min(versions, default=self.weight_version)  # no part: the prompt filled the context
        return Completion(token_ids=token_ids, logprobs=logprobs, finish_reason=finish, weight_version=version)

    async def context_length(self) -> int | None:
        """The server's context length (prompt plus generation), asked once and
        kept; ``None`` when the server does not report it.  A server that cannot
        be reached is asked again on the next call (the generation itself then
        fails and is retried as usual)."""
        return await self._context.get()  # one request, however many turns start at once

    async def _ask_context_length(self) -> tuple[int | None, bool]:
        """``(max_model_len, known)``: ``known`` is False when the answer may change
        (no connection, a 5xx), so it is asked again."""
        try:
            response = await self._http.get(self.models_path)
        except httpx.TransportError:
            return None, False
        if response.status_code >= 500:
            return None, False
        try:
            cards = _models_decoder.decode(response.content).data if response.status_code < 400 else []
        except msgspec.DecodeError:
            cards = []
        ours = [c for c in cards if c.id == self.model] or cards[:1]
        return (ours[0].max_model_len if ours else None), True

    def statistics(self) -> TokenClientStatistics:
        return TokenClientStatistics(generations=self._generations, resumed=self._resumed, interrupted=self._interrupted)

    async def _send(self, prompt: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Completion:
        attempt = 0
        while True:
            if self._state is not State.OPEN:
                raise BackendClosed(f"{type(self).__name__} for {self.base_url} is {self._state.name}")
            try:
                return await self._request(prompt, max_tokens, sampling, self.weight_version)
            except (ServerUnavailable, BadResponse):
                attempt += 1
                if attempt > self.retry.max_retries:
                    raise
            await anyio.sleep(self.retry.delay(attempt))

    async def _request(
        self, prompt: Sequence[int], max_tokens: int, sampling: SamplingParams, version: int
    ) -> Completion:
        """One exchange with the server, errors translated into :mod:`backends._errors`;
        ``version`` (the client's as the request is sent) goes on an answer without one."""
        raise NotImplementedError

    async def _exchange(self, path: str, body: bytes) -> bytes:
        """POST a JSON ``body`` to ``path``: the answer's content; errors made ours (``_errors``)."""
        try:
            status, content = await self._post(path, body)
        except httpx.TransportError as exc:  # connect/read/write/pool errors and timeouts
            raise ServerUnavailable(f"{self.base_url}{path}: {type(exc).__name__}: {exc}") from exc
        if status >= 400:
            text = f"{self.base_url}{path}: HTTP {status}: {content[:500].decode(errors='replace')}"
            raise ServerUnavailable(text) if status >= 500 else RequestRejected(text, status)
        return content

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST ``body`` to ``base_url + path`` straight through the transport:
        ``(status, content)``.  It skips httpx's client layer (URL merging, cookies,
        auth, redirects, event hooks: most of the orchestrator's CPU per turn in
        ``benchmarks/paper_scale.py``), and on our :class:`Http11Transport` httpx's
        request and response models too.  On any other transport the request is
        built with its headers whole (``Host`` and ``Content-Length`` added as httpx
        would): the same request at a third of the CPU.

        Raises:
            httpx.TransportError: connection errors and timeouts (the caller translates).
        """
        if (url := self._urls.get(path)) is None:
            url = self._urls[path] = httpx.URL(self.base_url + path)
        if isinstance(self._transport, Http11Transport):
            return await self._transport.post((url.host, url.port or 80), url.raw_path, self._raw_headers, body)
        headers = [(b"Host", url.netloc), *self._raw_headers, (b"Content-Length", b"%d" % len(body))]
        request = httpx.Request("POST", url, headers=headers, stream=httpx.ByteStream(body), extensions=self._extensions)
        request.read()  # as content= would: the body is there for transports that read .content
        response = await self._transport.handle_async_request(request)
        try:
            content = await response.aread()
        finally:
            await response.aclose()
        return response.status_code, content


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
    """

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
    ) -> None:
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        super().__init__(
            base_url.rstrip("/"), model=model, headers=headers, timeout=timeout,
            max_connections=max_connections, retry=retry, transport=transport,
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
        if sampling.top_k > 0:
            body["top_k"] = sampling.top_k
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        return _encoder.encode(body)

    async def _request(
        self, prompt: Sequence[int], max_tokens: int, sampling: SamplingParams, version: int
    ) -> Completion:
        return self._parse(await self._exchange("/completions", self._body(prompt, max_tokens, sampling)), version)

    def _parse(self, content: bytes, sent_version: int) -> Completion:
        parsed: _Response[float] | _Response[float | None]
        try:
            try:
                parsed = _decoder.decode(content)
                logprobs_of = _logprobs
            except msgspec.ValidationError:  # a null logprob (or a bad answer: decoded again to tell)
                parsed = _nullable_decoder.decode(content)
                logprobs_of = _nullable_logprobs
            choice = parsed.choices[0]
        except (msgspec.DecodeError, IndexError) as exc:
            raise BadResponse(f"{self.base_url}: undecodable completion: {content[:200]!r}") from exc
        lp = choice.logprobs
        ids = choice.token_ids
        if ids is None:  # servers without return_token_ids: "token_id:123" strings
            try:
                ids = [int(t.removeprefix("token_id:")) for t in _tokens_decoder.decode(lp.tokens if lp else b"[]")]
            except (msgspec.DecodeError, ValueError) as exc:
                raise BadResponse(f"{self.base_url}: no token ids in the completion") from exc
        logprobs = logprobs_of(lp)
        if len(logprobs) != len(ids):
            raise BadResponse(f"{self.base_url}: {len(ids)} token ids but {len(logprobs)} logprobs")
        version = parsed.weight_version
        if isinstance(version, str):
            version = parse_vllm_weight_version(version)
        if version is None:
            version = sent_version
        return Completion(
            token_ids=ids,
            logprobs=logprobs,
            finish_reason=_FINISH.get(choice.finish_reason, "stop"),
            weight_version=version,
            text=choice.text,
        )


def _logprobs(lp: _Logprobs[float] | None) -> list[float]:
    return lp.token_logprobs if lp else []


def _nullable_logprobs(lp: _Logprobs[float | None] | None) -> list[float]:
    return [0.0 if x is None else x for x in (lp.token_logprobs if lp else [])]
