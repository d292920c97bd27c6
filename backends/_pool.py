"""A pool of inference servers behind one ``generate``: the rollout core's ``TokenBackend``.

The pool is the thin async driver of :class:`backends._dispatch.Dispatcher`: it
polls each server's load, asks the policy where a turn goes, waits when the
policy says there is no room (waiting turns are admitted largest remaining
budget first), and gives the reservation back when the turn ends, and what a
trajectory holds between turns when the agent loop calls ``end_session``.

Fault tolerance: a turn's tokens stream in (:class:`backends._progress.Progress`).
When its server fails (connection refused or reset, 5xx or undecodable answers after
the client's short retries, or no new token for ``stall_timeout_s``), the server is
marked down and the turn goes on on another server from every token it has, the
failed request's streamed ones included: nothing is generated twice and
``max_tokens`` counts what was generated.  A long healthy turn is never taken for
a hung one: only progress counts (``request_timeout_s`` is an outer bound on one
request, past which the turn moves but its server, slow rather than hung, stays).
The trajectory never sees the failure, only a longer latency; its tokens are neither lost nor
duplicated.  The poller brings a server back as soon as it answers again (after a
restart by the fleet), first running ``on_server_back`` (the weight sync uses it
to load the current weights into a server that restarted on old ones).

Covered: servers dying, hanging (mid-stream too), restarting on the same address,
all servers down for a while (turns wait up to ``unavailable_timeout_s``).  Not covered: a
server that answers wrong tokens without an error; requests sent to servers
behind the pool's back (their KV usage is only seen through polling).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from types import TracebackType
from typing import Literal, Self, final

import anyio
import httpx
from anyio.abc import TaskStatus

from httpgate import transport_for

from ._admission import PoolAdmission, PoolState, Waiter
from ._dispatch import Dispatcher, Policy
from ._errors import BackendError, BadResponse, ServerUnavailable
from ._pool_server import POLL_TIMEOUT_S, PoolServer, PoolStatistics, ServerSpec
from ._progress import Progress, StallWatch
from ._retry import RetryPolicy
from ._sglang import SGLangTokenClient
from ._types import Completion, SamplingParams
from ._vllm_client import TokenClient

__all__ = ["PoolServer", "PoolStatistics", "ServerPool", "ServerSpec"]


@final
class ServerPool(PoolAdmission):
    """Many OpenAI-compatible servers behind one ``generate`` (a ``TokenBackend``).

    Usage::

        async with ServerPool(["http://h1:8000", "http://h2:8000"], model="m") as pool:
            completion = await pool.generate(ids, max_tokens=512, sampling=s, session=(pid, i))

    Args:
        servers: server roots or :class:`ServerSpec` (engine ``vllm`` or ``sglang``).
        model: model name sent in requests.
        policy: ``"budget"`` (free KV budget with affinity) or ``"round_robin"``.
        order: which waiting turns get room first (see :meth:`_admit`): ``"budget"``,
            the largest remaining token budget; ``"session"``, the oldest session's.
        affinity_slack, affinity_queue_slack, expected_new_tokens, hold_reports,
            hold_headroom: the dispatcher's, see :class:`backends.Dispatcher`.
        reserve_new_tokens: cap on the new tokens a request reserves; ``None``
            reserves all of ``max_tokens`` (no server can overflow).
        expected_reservations: reserve the running mean generation length instead
            of the cap (rStar2's free-KV dispatch: far more concurrency; growth
            beyond it is covered by ``headroom`` and the servers' own reports).
        headroom: fraction of each server's KV cache kept out of admission.
        default_capacity_tokens: capacity assumed for a server until its first poll.
        poll_interval_s: how often each server's load and health are polled.
        stall_timeout_s: a request whose server sends no new token for this long
            is given up: the server counts as hung (taken out of rotation until it
            answers a poll again) and the turn goes on elsewhere from its tokens.
            Not counted while a weight sync holds the pool.  ``None``: progress is
            not watched.
        request_timeout_s: outer bound on one request, however its tokens flow:
            past it the turn goes on on another server from its tokens (its server
            stays in rotation).  ``None``: no bound (the transport's read timeout
            still applies).
        unavailable_timeout_s: how long a turn waits while no server is up before
            raising :class:`ServerUnavailable`.
        max_failovers: resubmissions of one turn before giving up.
        retry: the per-server clients' retry policy; short (by default one retry
            after at most 0.1 s), because moving the turn to another server is the
            pool's retry.
        timeout: the per-server clients' httpx timeouts.
        max_connections: size of each per-server client's connection pool.
        api_key: the servers' shared secret (a bearer token on every request).
        transport: an httpx transport for every client (tests).
    """

    def __init__(
        self,
        servers: Sequence[str | ServerSpec],
        *,
        model: str,
        policy: Policy = "budget",
        order: Literal["budget", "session"] = "budget",
        affinity_slack: float = 0.25,
        affinity_queue_slack: int | None = 8,
        expected_new_tokens: int = 1024,
        hold_reports: int = 2,
        hold_headroom: float = 0.04,
        reserve_new_tokens: int | None = None,
        expected_reservations: bool = True,
        headroom: float = 0.1,
        default_capacity_tokens: int = 1 << 20,
        poll_interval_s: float = 1.0,
        stall_timeout_s: float | None = 60.0,
        request_timeout_s: float | None = None,
        unavailable_timeout_s: float = 600.0,
        max_failovers: int = 8,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout | None = None,
        max_connections: int = 4096,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        specs = [ServerSpec(url=s) if isinstance(s, str) else s for s in servers]
        if not specs:
            raise ValueError("servers: expected at least one server")
        self.model = model
        self.reserve_new_tokens = reserve_new_tokens
        self.expected_reservations = expected_reservations
        self.poll_interval_s = poll_interval_s
        self.max_failovers = max_failovers
        self.stall_timeout_s = stall_timeout_s
        self.request_timeout_s = request_timeout_s
        self.on_server_back: Callable[[PoolServer], Awaitable[None]] | None = None
        """Run before a down server re-enters rotation (never while a sync holds the pool); raising keeps it down."""
        retry = retry or RetryPolicy(max_retries=1, initial_s=0.1, max_s=0.5)
        timeout = timeout or httpx.Timeout(3600.0, connect=5.0, pool=60.0)
        auth = {"api_key": api_key, "retry": retry, "timeout": timeout, "max_connections": max_connections}
        self.servers: list[PoolServer] = []
        for i, spec in enumerate(specs):
            url = spec.url.rstrip("/").removesuffix("/v1")
            client: TokenClient | SGLangTokenClient
            if spec.engine == "vllm":
                client = TokenClient(url + "/v1", model=model, transport=transport, **auth)
            else:
                client = SGLangTokenClient(url, model=model, transport=transport, **auth)
            admin_http = httpx.AsyncClient(
                base_url=url, timeout=httpx.Timeout(600.0, connect=5.0), transport=transport or transport_for(url),
                trust_env=False,
                headers={"authorization": f"Bearer {api_key}"} if api_key else None,
            )  # fmt: skip
            self.servers.append(PoolServer(i, spec, client, admin_http))
        dispatcher = Dispatcher(
            [default_capacity_tokens] * len(specs),
            policy=policy,
            affinity_slack=affinity_slack,
            affinity_queue_slack=affinity_queue_slack,
            expected_new_tokens=expected_new_tokens,
            headroom=headroom,
            hold_reports=hold_reports,
            hold_headroom=hold_headroom,
        )
        super().__init__(dispatcher, order=order, unavailable_timeout_s=unavailable_timeout_s)
        self._weight_version = 0
        self._turns = self._failovers = self._lost = self._back = 0
        self._stalls = self._overdue = self._kept = 0
        self._stall_watch = StallWatch(stall_timeout_s, request_timeout_s)
        self._stack = contextlib.AsyncExitStack()

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        """Open every client and poll every server once (servers that do not answer
        start as down), then start the pollers."""
        if self._state is not PoolState.UNOPENED:
            raise RuntimeError(f"cannot open a ServerPool that is {self._state.name}")
        async with contextlib.AsyncExitStack() as stack:
            for server in self.servers:
                await stack.enter_async_context(server.client)
                await stack.enter_async_context(server._admin_http)
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)  # runs before the group waits
            tg.start_soon(self._stall_watch.run)
            for server in self.servers:
                await tg.start(self._watch, server)
            self._stack = stack.pop_all()
        self._state = PoolState.OPEN
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._state = PoolState.CLOSED
        for waiter in self._queue:
            waiter.event.set()  # to raise BackendClosed
        self._wake(everyone=True)  # admitted turns give their tickets back
        self._notify()
        # Not shielded as a whole: the task group must exit in its own scope.  The
        # clients shield their own closing.
        await self._stack.__aexit__(exc_type, exc, tb)

    # -- the TokenBackend ------------------------------------------------------------

    async def generate(
        self, prompt_ids: Sequence[int], *, max_tokens: int, sampling: SamplingParams, session: Hashable = None
    ) -> Completion:
        """Generate up to ``max_tokens`` after ``prompt_ids`` on the best server.

        ``session`` (a trajectory's key) keeps later turns on the same server when
        it is not overloaded.  Turns that wait for room are admitted largest
        ``max_tokens`` (the trajectory's remaining budget) first, then oldest
        first: see :meth:`_admit`.  Failures of one server are handled here (see
        the module docstring); the result reads as one generation whose weight
        version is the oldest of its parts.

        Raises:
            BackendClosed: the pool is closed.
            RequestRejected: a server refused the request (4xx): it is malformed.
            ServerUnavailable: no server was up for ``unavailable_timeout_s``, or the
                turn failed on ``max_failovers + 1`` servers in a row.

        Cancellation: safe at any point; the reservation is released.
        """
        progress = Progress()
        avoid: int | None = None
        failures = 0  # in a row, without a token
        while True:
            done = len(progress.token_ids)
            remaining = max_tokens - done
            if remaining <= 0:
                progress.finish = "length"
                break
            prompt = len(prompt_ids) + done
            reserve = remaining if self.reserve_new_tokens is None else min(remaining, self.reserve_new_tokens)
            if self.expected_reservations:
                ticket = await self._acquire(Waiter(prompt, session, avoid, reserve), remaining)
            else:
                ticket = await self._acquire(Waiter(prompt + reserve, session, avoid, None), remaining)
            server = self.servers[ticket.server]
            generated: int | None = None  # reported only for turns that ran to their end
            hung = True
            try:
                with self._stall_watch.watch(progress) as watched:
                    await server.client.generate_into(progress, prompt_ids, max_tokens=max_tokens, sampling=sampling)
                if watched.expired:
                    hung = watched.stalled  # else past request_timeout_s: slow, not hung
                    raise self._overtime(server, hung)
                if progress.finish != "abort":
                    generated = len(progress.token_ids) - done
            except (ServerUnavailable, BadResponse) as exc:
                self._failovers += 1
                self._kept += len(progress.token_ids) - done
                if hung:
                    self._set_down(server.index)
                failures = 0 if len(progress.token_ids) > done else failures + 1
                if failures > self.max_failovers:
                    raise ServerUnavailable(f"turn failed on {failures} servers in a row; last: {exc}") from exc
                avoid = server.index
                continue
            finally:
                self._release(ticket, generated)
            if progress.finish != "abort":
                break
            avoid = server.index  # aborted past the client's resumes: try another server
            failures += 1
            if failures > self.max_failovers:
                break
        self._turns += 1
        return progress.completion(self._weight_version)

    def _overtime(self, server: PoolServer, stalled: bool) -> ServerUnavailable:
        """The error of a request its deadline ended (counted)."""
        if stalled:
            self._stalls += 1
            return ServerUnavailable(f"{server.url}: no new token for {self._stall_watch.stall_s:g} s (pool stall_timeout_s)")
        self._overdue += 1
        return ServerUnavailable(f"{server.url}: the request outlasted the pool's request_timeout_s ({self._stall_watch.limit_s:g} s)")

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Admit no new turn inside the block (see :meth:`PoolAdmission.held`); no
        request in flight counts as stalled meanwhile (a weight sync pauses the
        servers on purpose)."""
        with self._stall_watch.paused():
            async with super().held():
                yield

    # -- health and load -------------------------------------------------------------

    def _set_down(self, index: int) -> None:
        if self._dispatcher.is_up(index):
            self._dispatcher.set_up(index, False)
            self._lost += 1
            self._notify()

    async def _watch(self, server: PoolServer, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll one server forever: load into the dispatcher, down on failure, back
        (after ``on_server_back``) when it answers again."""
        first = True
        while True:
            try:
                with anyio.fail_after(POLL_TIMEOUT_S):
                    load = await server.admin.load()
            except (BackendError, TimeoutError):
                self._set_down(server.index)
            else:
                self._dispatcher.observe(server.index, load)
                # Not while a sync holds the pool: it would come back on the version being replaced.
                if first or (not self._dispatcher.is_up(server.index) and not self._held):
                    await self._bring_back(server, first)
                self._notify()
            if first:
                first = False
                task_status.started()
            await anyio.sleep(self.poll_interval_s)

    async def _bring_back(self, server: PoolServer, first: bool) -> None:
        if not first and self.on_server_back is not None:
            try:
                await self.on_server_back(server)
            except BackendError:
                return  # stays down; the next poll tries again
        if not self._dispatcher.is_up(server.index):
            self._back += 1
        server.client.weight_version = self._weight_version
        self._dispatcher.set_up(server.index, True)

    def set_up(self, index: int, up: bool) -> None:
        """Put a server in or out of rotation by hand (the poller may undo it)."""
        if up:
            self._dispatcher.set_up(index, True)
            self._notify()
        else:
            self._set_down(index)

    def is_up(self, index: int) -> bool:
        return self._dispatcher.is_up(index)

    # -- for the weight sync ---------------------------------------------------------

    @property
    def weight_version(self) -> int:
        """The version stamped on tokens from now on (set by the weight sync)."""
        return self._weight_version

    def set_weight_version(self, version: int, servers: Sequence[int] | None = None) -> None:
        """Stamp ``version`` on what ``servers`` (default: all) generate from now on."""
        self._weight_version = version
        for i in range(len(self.servers)) if servers is None else servers:
            self.servers[i].client.weight_version = version

    def statistics(self) -> PoolStatistics:
        dispatch = self._dispatcher.statistics()
        clients = [s.client.statistics() for s in self.servers]
        return PoolStatistics(
            dispatch=dispatch,
            servers_up=sum(s.up for s in dispatch.servers),
            turns=self._turns,
            failovers=self._failovers,
            servers_lost=self._lost,
            servers_back=self._back,
            weight_version=self._weight_version,
            waiting=len(self._queue),
            resumed=sum(c.resumed for c in clients),
            interrupted=sum(c.interrupted for c in clients),
            stalls=self._stalls,
            overdue=self._overdue,
            tokens_kept=self._kept,
        )
