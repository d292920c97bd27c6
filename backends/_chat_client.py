"""Chat-completions (text) client over the official OpenAI SDK, for endpoints that
speak only chat: evaluating hosted models.

The SDK brings what users expect from it: ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` /
``OPENAI_ORG_ID`` from the environment, organisation and project headers, Azure
endpoints (``AsyncAzureOpenAI``), and its own retries.  It runs on httpx, hence on
asyncio and trio alike.  No token ids or logprobs come back, so this mode is for
evaluation, never training.

On a plain ``http://`` endpoint (a local vLLM) :meth:`ChatClient.from_url` gives the
SDK an ``httpx.AsyncClient`` on :class:`httpgate.Http11Transport`: the SDK's own
(httpcore's pool; httpcore2's in SDKs on httpx2) closes a response in a shielded
wait that anyio's asyncio Lock (< 4.14, agronholm/anyio#1145) can leave hanging
past any timeout or cancellation.
``https://`` (a hosted API) keeps the SDK's client: TLS, proxies from the environment.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, final

import anyio
import httpx

from httpgate import Http11Transport

from ._ask_once import AskOnce
from ._errors import BackendClosed, BadResponse, RequestRejected, ServerUnavailable
from ._types import ChatCompletion, FinishReason, SamplingParams

if TYPE_CHECKING:
    # Imported where used: the SDK takes 0.5-1 s to import, which every user of
    # ``backends`` (each rollout shard's worker) would pay for a client that only
    # chat-mode evaluation builds.  A ChatClient exists only once it is imported.
    import openai

_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", None: "abort"}


def _unreachable() -> tuple[type[Exception], ...]:
    """Answers that may change: asked again next time."""
    import openai

    return (openai.APIConnectionError, openai.InternalServerError)


@final
class ChatClient:
    """Text in, text out, through ``client.chat.completions.create``.

    Args:
        client: a configured ``openai.AsyncOpenAI`` (or ``AsyncAzureOpenAI``); the
            ChatClient closes it on exit.
        model: the model (Azure: deployment) name.
        extra_body: engine-specific fields passed through (e.g. ``{"top_k": 20}``).

    Against a server that reports its context (vLLM: ``max_model_len`` on
    ``/v1/models``, asked once), each request's ``max_tokens`` is clamped to what the
    context leaves after the conversation, which vLLM's ``/tokenize`` counts; a
    conversation that fills it gets an empty ``length`` completion without a request.
    Other servers are sent ``max_tokens`` unchanged.
    """

    def __init__(self, client: openai.AsyncOpenAI, *, model: str, extra_body: dict[str, Any] | None = None) -> None:
        self._client = client
        self.model = model
        self.extra_body = extra_body or {}
        self._closed = False
        self._context = AskOnce(self._ask_context_length, None)
        self._tokenize = True  # until the server shows it has no /tokenize

    @classmethod
    def from_url(
        cls,
        base_url: str | None,
        *,
        model: str,
        api_key: str | None = None,
        max_retries: int = 5,
        timeout: httpx.Timeout | None = None,
        max_connections: int = 1000,
    ) -> Self:
        """A client for ``base_url``; ``None`` means the SDK's default (or
        ``OPENAI_BASE_URL``).  Local servers often need no key: a placeholder is sent.
        ``timeout`` (default: the SDK's) and ``max_connections`` shape its HTTP pool,
        which the client owns and closes on exit."""
        import os

        import openai

        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        url = base_url or os.environ.get("OPENAI_BASE_URL")
        if url is not None and (url.startswith("http://") or (url.startswith("https://") and not _https_proxy())):
            # follow_redirects as the SDK's own client; our transport for http and
            # https (httpcore's can hang past a cancellation); no proxy from the
            # environment for http (a server of ours, like the token clients')
            transport = Http11Transport(max_connections=max_connections)  # each request carries its timeouts
            http = httpx.AsyncClient(transport=transport, follow_redirects=True, trust_env=False)
        else:
            http = openai.DefaultAsyncHttpxClient(
                limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
            )
        options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=max_retries, http_client=http, **options)
        return cls(client, model=model)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._client.close()

    async def chat(
        self, messages: list[dict[str, str]], *, max_tokens: int, sampling: SamplingParams
    ) -> ChatCompletion:
        """One assistant message.

        Raises:
            BackendClosed: after close.
            RequestRejected: 4xx (bad key, unknown model, context too long).
            ServerUnavailable: connection errors, timeouts, 5xx after the SDK's retries.
            BadResponse: an answer with no choices.
        """
        import openai

        if self._closed:
            raise BackendClosed("ChatClient is closed")
        max_tokens = await self._clamp(messages, max_tokens)
        if max_tokens <= 0:
            return ChatCompletion(text="", finish_reason="length", completion_tokens=0)
        extra = dict(self.extra_body)
        if sampling.top_k > 0:
            extra.setdefault("top_k", sampling.top_k)
        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                seed=sampling.seed,
                extra_body=extra or None,
            )
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise ServerUnavailable(f"{self.model}: HTTP {exc.status_code}: {exc.message}") from exc
            raise RequestRejected(f"{self.model}: HTTP {exc.status_code}: {exc.message}", exc.status_code) from exc
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise ServerUnavailable(f"{self.model}: {exc}") from exc
        if not response.choices:
            raise BadResponse(f"{self.model}: a completion with no choices")
        choice = response.choices[0]
        usage = response.usage
        return ChatCompletion(
            text=choice.message.content or "",
            finish_reason=_FINISH.get(choice.finish_reason, "stop"),
            completion_tokens=usage.completion_tokens if usage else 0,
        )

    async def _clamp(self, messages: list[dict[str, str]], max_tokens: int) -> int:
        context = await self._context.get()  # one question, however many turns start at once
        if context is None:
            return max_tokens
        prompt = await self._count(messages) if self._tokenize else None
        return min(max_tokens, context - (prompt or 0))

    async def _ask_context_length(self) -> tuple[int | None, bool]:
        """``(max_model_len, known)`` from the model list; ``known`` is False when
        the server could not answer (asked again on the next turn)."""
        import openai

        try:
            page = await self._client.models.list()
        except _unreachable():
            return None, False
        except openai.OpenAIError:
            return None, True
        cards = [m for m in page.data if m.id == self.model] or page.data[:1]
        length = (cards[0].model_extra or {}).get("max_model_len") if cards else None
        return (length if isinstance(length, int) else None), True

    async def _count(self, messages: list[dict[str, str]]) -> int | None:
        """The conversation's prompt tokens (chat template and generation prompt
        included) by vLLM's ``/tokenize``, beside ``/v1``; None if not counted."""
        import openai

        root = str(self._client.base_url).rstrip("/").removesuffix("/v1")
        body = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        try:
            counted = await self._client.post(f"{root}/tokenize", body=body, cast_to=object)
        except _unreachable():
            return None
        except openai.OpenAIError:
            self._tokenize = False  # no such endpoint: the context alone bounds max_tokens
            return None
        count = counted.get("count") if isinstance(counted, dict) else None
        return count if isinstance(count, int) else None


def _https_proxy() -> bool:
    """Whether the environment names a proxy for https (``HTTPS_PROXY``,
    ``ALL_PROXY``): the SDK's own client honours it, our transport speaks no proxy."""
    import urllib.request

    proxies = urllib.request.getproxies()
    return "https" in proxies or "all" in proxies
