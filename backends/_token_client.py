"""What every token-id client shares (the training hot path): the connection pool and
its lifecycle, the context length, resumption of aborted generations, retries, and
one streamed HTTP exchange.

The engines' clients say how a request is made and read: :class:`backends.TokenClient`
(vLLM's ``/v1/completions``, in ``_vllm_client``) and
:class:`backends.SGLangTokenClient` (SGLang's ``/generate``).  Both stream: the
answer's tokens come in chunks as the server samples them, and go into a
:class:`backends._progress.Progress` at once, so that a request that fails half-way
keeps what it streamed (the next request continues from it) and the pool can tell a
server that makes no progress from one that is merely slow.  Bodies are encoded and
decoded with msgspec, typed decoders built once: this path runs tens of thousands of
times per step.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Sequence
from types import TracebackType
from typing import Final, Self

import anyio
import httpx
import msgspec

from httpgate import Http11Transport, transport_for

from ._ask_once import AskOnce
from ._errors import BackendClosed, BadResponse, RequestRejected, ServerUnavailable
from ._progress import Progress, SSEReader
from ._retry import RetryPolicy
from ._types import Completion, FinishReason, SamplingParams

__all__ = ["FINISH_REASONS", "MAX_RESUMES", "CompletionClient", "PartReader", "State", "TokenClientStatistics"]

MAX_RESUMES: Final = 16
"""Aborted generations resumed per call before giving up with ``abort``: a server that
aborts every request (stuck paused, shutting down) must not spin a trajectory forever."""


class _ModelCard(msgspec.Struct):
    id: str = ""
    max_model_len: int | None = None
    """vLLM's (and SGLang's) context length: prompt plus generated tokens."""


class _Models(msgspec.Struct):
    data: list[_ModelCard] = []


_models_decoder: Final = msgspec.json.Decoder(_Models)


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


FINISH_REASONS: Final[dict[str | None, FinishReason]] = {"stop": "stop", "length": "length", "abort": "abort", None: "abort"}
"""A server's finish reason as ours: none is ``abort`` (cut short; resumed from its
tokens), one we do not know is ``stop``."""


class PartReader(SSEReader):
    """One streamed request's answer, read into a :class:`Progress` chunk by chunk.

    An engine's reader decodes each event (:meth:`event`) and calls :meth:`tokens`
    and sets ``finish``; ``version`` is the oldest weight version its chunks
    reported (``None``: they report none, and the version the request was sent
    with counts).  :meth:`end` runs however the request ends.
    """

    __slots__ = ("finish", "progress", "sent_version", "start", "version")

    def __init__(self, where: str, progress: Progress, sent_version: int) -> None:
        super().__init__(where)
        self.progress = progress
        self.sent_version = sent_version
        self.start = len(progress.token_ids)
        self.version: int | None = None
        self.finish: str | None = None

    def tokens(self, token_ids: list[int], logprobs: list[float]) -> None:
        if len(token_ids) != len(logprobs):
            raise BadResponse(f"{self.where}: {len(token_ids)} token ids but {len(logprobs)} logprobs")
        self.progress.add(token_ids, logprobs)

    def saw_version(self, version: int | None) -> None:
        if version is not None and (self.version is None or version < self.version):
            self.version = version

    def end(self, finished: bool) -> None:
        """The request is over (``finished``: its answer was read whole).  Its
        version counts if it added tokens or ended the generation; the generation
        is finished if it said so (an answer without a finish reason was cut short:
        ``abort``, resumed from its tokens)."""
        progress = self.progress
        finish = FINISH_REASONS.get(self.finish, "stop") if finished else "abort"
        if len(progress.token_ids) > self.start or finish != "abort":
            progress.versions.append(self.sent_version if self.version is None else self.version)
        progress.finish = finish


class CompletionClient:
    """The connection pool and its lifecycle, the resumption of aborted generations,
    retries, and one streamed exchange; a subclass says how a request is made
    (``_body``) and read (``_reader``, ``_parse``).

    Use as ``async with client``; the client owns its connection pool and closes it
    on exit.

    Each request's ``max_tokens`` is clamped to what the server's context leaves
    after the prompt: the context length (``max_model_len`` on ``GET /v1/models``) is
    learnt once, on the first generation.  A server that does not report it is
    sent ``max_tokens`` unchanged.

    ``stream=False`` asks for each answer whole (servers that do not stream token
    ids); a request that fails then loses what it generated, and nothing can tell
    a slow server from a hung one before the answer.
    """

    models_path: str = "/models"
    """Where the server lists its models, relative to ``base_url``."""
    generate_path: str = ""
    """Where generations are asked for, relative to ``base_url``."""

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
        stream: bool = True,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.retry = retry or RetryPolicy()
        self.stream = stream
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
        self._url = httpx.URL(self.base_url + self.generate_path)
        self._where = f"{self.base_url}{self.generate_path}"
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
        resumed from the tokens it produced, up to :data:`MAX_RESUMES` times; a
        request that fails after streaming some tokens is retried from them.  The
        result reads as one generation whose version is the oldest of its parts.

        ``max_tokens`` is clamped to the server's context (:meth:`context_length`)
        minus the prompt; a prompt that fills the context gets no tokens and
        ``finish_reason == "length"``, without a request.

        Raises:
            BackendClosed: the client was closed.
            RequestRejected: the server answered 4xx (a bad request; not retried).
            ServerUnavailable: connection errors, timeouts, 5xx or a stream that
                failed outlasted the retries.
            BadResponse: the answer did not decode, after the retries.

        Cancellation: safe at any point and never delayed; the HTTP request is
        abandoned and its connection closed (see :class:`httpgate.Http11Transport`).
        """
        progress = Progress()
        await self.generate_into(progress, prompt_ids, max_tokens=max_tokens, sampling=sampling)
        return progress.completion(self.weight_version)

    async def generate_into(
        self, progress: Progress, prompt_ids: Sequence[int], *, max_tokens: int, sampling: SamplingParams
    ) -> None:
        """Go on with the generation ``progress`` holds (its tokens follow
        ``prompt_ids``; ``max_tokens`` counts them) until it finishes, as
        :meth:`generate` does; the tokens go into ``progress`` as they stream in,
        so whatever this raises, ``progress`` keeps them.  The pool calls it on one
        server after another with the same ``progress``.

        Raises:
            The errors of :meth:`generate`.
        """
        context = self._context.value if self._context.known else await self._context.get()  # the hot path: no await
        interrupted = False
        attempts = resumes = 0
        while True:
            done = len(progress.token_ids)
            remaining = max_tokens - done
            if context is not None:  # vLLM refuses a request whose prompt + max_tokens exceeds it
                remaining = min(remaining, context - len(prompt_ids) - done)
            if remaining <= 0:
                progress.finish = "length"
                break
            if self._state is not State.OPEN:
                raise BackendClosed(f"{type(self).__name__} for {self.base_url} is {self._state.name}")
            prompt = list(prompt_ids) + progress.token_ids if done else prompt_ids
            sent = self.weight_version
            try:
                await self._request(progress, prompt, remaining, sampling, sent)
            except (ServerUnavailable, BadResponse):
                attempts += 1
                if attempts > self.retry.max_retries:
                    raise
                await anyio.sleep(self.retry.delay(attempts))
                continue
            interrupted |= self.weight_version != sent  # a ``keep`` sync froze it meanwhile
            if progress.finish != "abort" or resumes == MAX_RESUMES:
                break
            resumes += 1
            self._resumed += 1
            interrupted = True
        self._generations += 1
        self._interrupted += interrupted

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

    # -- one request -------------------------------------------------------------------

    def _body(self, prompt: Sequence[int], max_tokens: int, sampling: SamplingParams) -> bytes:
        """The request's JSON (streamed or not, as ``self.stream`` says)."""
        raise NotImplementedError

    def _reader(self, progress: Progress, sent_version: int) -> PartReader:
        """A reader of one streamed answer into ``progress``."""
        raise NotImplementedError

    def _parse(self, content: bytes, sent_version: int) -> Completion:
        """A whole (not streamed) answer; ``sent_version`` goes on an answer without one."""
        raise NotImplementedError

    async def _request(
        self, progress: Progress, prompt: Sequence[int], max_tokens: int, sampling: SamplingParams, version: int
    ) -> None:
        """One request, its tokens added to ``progress`` as they come and
        ``progress.finish`` set from its end; errors are :mod:`backends._errors`'.
        ``version`` (the client's as the request is sent) counts for an answer without one."""
        body = self._body(prompt, max_tokens, sampling)
        if not self.stream:
            c = self._parse(await self._exchange(body), version)
            progress.add(c.token_ids, c.logprobs)
            progress.versions.append(c.weight_version)
            progress.finish = c.finish_reason
            return
        reader = self._reader(progress, version)
        finished = False
        try:
            await self._exchange(body, reader.feed)
            reader.close()
            finished = True
        finally:
            reader.end(finished)

    async def _exchange(self, body: bytes, on_part: Callable[[bytes], None] | None = None) -> bytes:
        """POST a JSON ``body`` to the generation path: the answer's content (with
        ``on_part``, a 2xx answer's body goes to it part by part instead); errors
        made ours (``_errors``)."""
        try:
            status, content = await self._post(body, on_part)
        except httpx.TransportError as exc:  # connect/read/write/pool errors and timeouts
            raise ServerUnavailable(f"{self._where}: {type(exc).__name__}: {exc}") from exc
        if status >= 400:
            text = f"{self._where}: HTTP {status}: {content[:500].decode(errors='replace')}"
            raise ServerUnavailable(text) if status >= 500 else RequestRejected(text, status)
        return content

    async def _post(self, body: bytes, on_part: Callable[[bytes], None] | None) -> tuple[int, bytes]:
        """POST ``body`` to the generation path straight through the transport:
        ``(status, content)``.  It skips httpx's client layer (URL merging, cookies,
        auth, redirects, event hooks: most of the orchestrator's CPU per turn in
        ``benchmarks/paper_scale.py``), and on our :class:`Http11Transport` httpx's
        request and response models too.  On any other transport the request is
        built with its headers whole (``Host`` and ``Content-Length`` added as httpx
        would): the same request at a third of the CPU.

        Raises:
            httpx.TransportError: connection errors and timeouts (the caller translates).
        """
        url = self._url
        if isinstance(self._transport, Http11Transport):
            return await self._transport.post(url, self._raw_headers, body, on_part)
        headers = [(b"Host", url.netloc), *self._raw_headers, (b"Content-Length", b"%d" % len(body))]
        request = httpx.Request("POST", url, headers=headers, stream=httpx.ByteStream(body), extensions=self._extensions)
        request.read()  # as content= would: the body is there for transports that read .content
        response = await self._transport.handle_async_request(request)
        try:
            if on_part is None or response.status_code >= 300:
                return response.status_code, await response.aread()
            async for part in response.stream:  # type: ignore[union-attr]
                on_part(part)
            return response.status_code, b""
        finally:
            await response.aclose()
