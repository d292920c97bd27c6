"""``SandboxClient``: the ``Sandbox`` API over one or more ``rstar2 sandbox serve`` services.

    async with SandboxClient(["http://10.0.0.5:8089", "http://10.0.0.6:8089"]) as sandbox:
        result = await sandbox.run("print(1)")

Calls that arrive together are sent together: a batch closes when it holds
``batch_size`` calls or ``batch_window_s`` after its first call.  Batches go to
the addresses in turn, skipping one for ``cooldown_s`` after it failed to
connect; a batch whose address fails is retried on the next ones, up to
``retries`` more times.  The HTTP I/O is an ``httpx`` transport, so tests plug in
``httpx.MockTransport``; by default, on ``http://`` and ``https://`` addresses,
:class:`httpgate.Http11Transport`: httpx's default transport (httpcore) closes a
response in a shielded wait that anyio's asyncio Lock (< 4.14) can leave hanging past
any timeout or cancellation (agronholm/anyio#1145), so a batch could hang forever.

Every call gets exactly one result: if no address answers, the call's result is
``internal`` with the reason in ``stderr``.  A batch that failed *after* it was
sent may have run on the failed service; its retry runs it again.
"""

from __future__ import annotations

import enum
import itertools
import time
from collections import Counter
from collections.abc import Sequence
from types import TracebackType
from typing import final

import anyio
import httpx
import msgspec
from anyio.abc import TaskGroup

from httpgate import Http11Transport

from ._errors import SandboxClosed, ServiceError, ServiceUnavailable
from ._service import BatchRequest, BatchResponse, RunRequest
from ._types import ExecResult

_decode_batch = msgspec.json.Decoder(BatchResponse).decode
_encode = msgspec.json.Encoder().encode

MAX_CONNECTIONS = 100
"""Open connections at most, all addresses together: httpx's default cap, which the
client had before it had its own transport; a batch beyond it waits for one."""


HEALTH_TIMEOUT_S = 10.0
"""How long :meth:`SandboxClient.check` waits for one service's health answer."""


class ClientState(enum.Enum):
    """UNOPENED -> OPEN -> CLOSED."""

    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


@final
class ClientStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the client, taken without waiting."""

    state: str
    pending: int
    """Calls waiting for their batch to be sent."""
    in_flight_batches: int
    batches: int
    calls: int
    by_status: dict[str, int]
    retries: int
    """Batch sends repeated on another address after a failure."""
    addresses_down: list[str]


class _Call:
    __slots__ = ("request", "result", "done")

    def __init__(self, request: RunRequest) -> None:
        self.request = request
        self.result: ExecResult | None = None
        self.done = anyio.Event()


@final
class SandboxClient:
    """A :class:`sandbox.Sandbox` backed by remote sandbox services.

    Args:
        addresses: base URLs, e.g. ``["http://127.0.0.1:8089"]``.
        batch_size: most calls per request.
        batch_window_s: how long the first call of a batch waits for company.
        retries: extra attempts of a batch on the next addresses.
        cooldown_s: how long an address that failed is skipped.
        connect_timeout_s: TCP connect budget per attempt.
        read_margin_s: a batch may take its longest call's timeout plus this (queueing).
        api_key: the services' shared secret (sent as a bearer token); see ``read_secret``.
        transport: an ``httpx.AsyncBaseTransport`` (tests: ``httpx.MockTransport``);
            default :class:`httpgate.Http11Transport` (``http://`` and ``https://``,
            the certificates checked against httpx's CA bundle or
            ``SSL_CERT_FILE``; proxy variables in the environment are not used).

    Resource handling: an async context manager; owns its HTTP connections and one
    task group for the batches in flight.  On exit, unsent calls get ``internal``,
    and batches in flight are cancelled (their connections closed at once: the
    service sees the client go) and get ``internal``.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        batch_size: int = 64,
        batch_window_s: float = 0.002,
        retries: int = 2,
        cooldown_s: float = 5.0,
        connect_timeout_s: float = 5.0,
        read_margin_s: float = 120.0,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("addresses: expected at least one service URL")
        if batch_size < 1 or retries < 0 or batch_window_s < 0:
            raise ValueError("batch_size >= 1, retries >= 0, batch_window_s >= 0 expected")
        self.addresses = [a.rstrip("/") for a in addresses]
        self.batch_size, self.batch_window_s = batch_size, batch_window_s
        self.retries, self.cooldown_s = retries, cooldown_s
        self.read_margin_s = read_margin_s
        if transport is None:
            transport = Http11Transport(max_connections=MAX_CONNECTIONS)  # each request carries its timeouts
        self._http = httpx.AsyncClient(
            transport=transport,
            headers={"authorization": f"Bearer {api_key}"} if api_key else None,
            timeout=httpx.Timeout(connect=connect_timeout_s, read=None, write=30.0, pool=None),
        )
        self._state = ClientState.UNOPENED
        self._tg: TaskGroup | None = None
        self._pending: list[_Call] = []
        self._flush_soon = anyio.Event()
        self._next = itertools.count()
        self._down_until: dict[str, float] = {}
        self._in_flight = 0
        self._batches = 0
        self._retries = 0
        self._by_status: Counter[str] = Counter()

    @property
    def state(self) -> ClientState:
        return self._state

    async def __aenter__(self) -> SandboxClient:
        """Raises: RuntimeError if entered before (single-use)."""
        if self._state is not ClientState.UNOPENED:
            raise RuntimeError(f"SandboxClient: cannot open a client that is {self._state.value} (clients are single-use)")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._state = ClientState.OPEN
        tg.start_soon(self._batcher)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None
        self._state = ClientState.CLOSED
        for call in self._pending:
            self._finish(call, _internal("sandbox client closed before the call was sent"))
        self._pending.clear()
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            with anyio.CancelScope(shield=True):
                await self._http.aclose()

    async def run(self, code: str, stdin: str = "", timeout: float = 4.0) -> ExecResult:
        """Run ``code`` on a service; same contract as :meth:`SandboxPool.run`.

        Raises:
            RuntimeError: the client was never opened.
            SandboxClosed: the client is closed.
        """
        if self._state is not ClientState.OPEN:
            if self._state is ClientState.UNOPENED:
                raise RuntimeError("SandboxClient.run: not open; use `async with SandboxClient(...)`")
            raise SandboxClosed("SandboxClient.run: the client is closed")
        call = _Call(RunRequest(code, stdin, timeout))
        self._pending.append(call)
        if len(self._pending) >= self.batch_size:
            self._send_pending()
        else:
            self._flush_soon.set()
        try:
            await call.done.wait()
        except BaseException:
            if call in self._pending:
                self._pending.remove(call)
            raise
        assert call.result is not None
        return call.result

    async def check(self) -> list[str]:
        """Ask every address's ``GET /health`` (with the secret) and return the ones
        that did not answer ok; those are skipped for ``cooldown_s`` like any failed one.

        Raises:
            RuntimeError: the client is not open.
            ServiceError: a service refused the secret (401/403: the same secret is
                wrong for all of them).
            ServiceUnavailable: no address answered ok.
        """
        if self._state is not ClientState.OPEN:
            raise RuntimeError(f"SandboxClient.check: the client is {self._state.value}, not open")
        timeout = httpx.Timeout(self._http.timeout.connect, read=HEALTH_TIMEOUT_S, write=HEALTH_TIMEOUT_S, pool=None)
        down: dict[str, str] = {}
        for address in self.addresses:
            try:
                response = await self._http.get(f"{address}/health", timeout=timeout)
            except httpx.TransportError as e:
                down[address] = f"{type(e).__name__}: {e or 'no answer'}"
                continue
            if response.status_code in (401, 403):
                raise ServiceError(f"sandbox service {address} refused the secret ({response.status_code}): give it the "
                                   "one the services were started with")  # fmt: skip
            if response.status_code != 200 or not _healthy(response.content):
                down[address] = f"answered {response.status_code} {response.text[:200]}"
        for address in down:
            self._down_until[address] = time.monotonic() + self.cooldown_s
        if len(down) == len(self.addresses):
            raise ServiceUnavailable("no sandbox service answers: " + "; ".join(f"{a}: {why}" for a, why in down.items()))
        return list(down)

    def statistics(self) -> ClientStatistics:
        now = time.monotonic()
        return ClientStatistics(
            state=self._state.value,
            pending=len(self._pending),
            in_flight_batches=self._in_flight,
            batches=self._batches,
            calls=sum(self._by_status.values()),
            by_status=dict(self._by_status),
            retries=self._retries,
            addresses_down=[a for a, t in self._down_until.items() if t > now],
        )

    # -- batching ------------------------------------------------------------------
    async def _batcher(self) -> None:
        """Close a batch ``batch_window_s`` after its first call arrives."""
        while True:
            await self._flush_soon.wait()
            self._flush_soon = anyio.Event()
            if self.batch_window_s:
                await anyio.sleep(self.batch_window_s)
            if self._pending:
                self._send_pending()

    def _send_pending(self) -> None:
        assert self._tg is not None
        while self._pending:
            batch, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size :]
            self._in_flight += 1
            self._tg.start_soon(self._send_batch, batch)

    async def _send_batch(self, batch: list[_Call]) -> None:
        try:
            try:
                results = await self._post_with_retries(BatchRequest([c.request for c in batch]))
            except ServiceError as e:
                results = [_internal(str(e))] * len(batch)
            for call, result in zip(batch, results):
                self._finish(call, result)
        finally:
            self._in_flight -= 1
            for call in batch:  # cancelled (client closing) mid-flight
                self._finish(call, _internal("sandbox client closed while the call was in flight"))

    async def _post_with_retries(self, batch: BatchRequest) -> list[ExecResult]:
        """POST the batch to the next live address, moving on after a transport failure.

        Raises:
            ServiceUnavailable: every attempt failed to reach a service.
            ServiceError: a service answered with an error status or a bad body.
        """
        body = _encode(batch)
        read = max(c.timeout for c in batch.calls) + self.read_margin_s
        errors = []
        for attempt in range(self.retries + 1):
            address = self._pick()
            if attempt:
                self._retries += 1
            try:
                response = await self._http.post(
                    f"{address}/v1/batch", content=body,
                    headers={"content-type": "application/json"},
                    timeout=httpx.Timeout(self._http.timeout.connect, read=read, write=30.0, pool=None),
                )
            except httpx.TransportError as e:
                self._down_until[address] = time.monotonic() + self.cooldown_s
                errors.append(f"{address}: {type(e).__name__}: {e}")
                continue
            self._batches += 1
            if response.status_code != 200:
                raise ServiceError(f"sandbox service {address} answered {response.status_code}: {response.text[:500]}")
            try:
                results = _decode_batch(response.content).results
            except msgspec.DecodeError as e:
                raise ServiceError(f"sandbox service {address} sent an undecodable body: {e}") from e
            if len(results) != len(batch.calls):
                raise ServiceError(f"sandbox service {address} sent {len(results)} results for {len(batch.calls)} calls")
            return results
        raise ServiceUnavailable("sandbox service unreachable: " + "; ".join(errors))

    def _pick(self) -> str:
        """The next address in turn, preferring ones not in cool-down."""
        now = time.monotonic()
        n = len(self.addresses)
        start = next(self._next)
        for k in range(n):
            address = self.addresses[(start + k) % n]
            if self._down_until.get(address, 0.0) <= now:
                return address
        return self.addresses[start % n]  # all down: try anyway

    def _finish(self, call: _Call, result: ExecResult) -> None:
        if call.result is None:
            call.result = result
            self._by_status[result.status] += 1
            call.done.set()


def _healthy(body: bytes) -> bool:
    try:
        health = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return False
    return isinstance(health, dict) and health.get("status") == "ok"


def _internal(message: str) -> ExecResult:
    return ExecResult("internal", stderr=f"[sandbox] {message}")
