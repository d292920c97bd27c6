"""Typed configuration of where generations come from: endpoints, the server pool in
front of them, servers the run launches, and how new weights reach them."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ._rollout import PositiveFloat, PositiveInt


class InferenceConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Where generations come from: one or more OpenAI-compatible servers."""

    base_urls: Annotated[list[str], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["http://127.0.0.1:8000/v1"]
    )
    """Server base URLs, each ending in ``/v1``."""
    model: str = "default"
    """Model name sent in every request (vLLM: ``--served-model-name``)."""
    mode: Literal["tokens", "chat"] = "tokens"
    """``tokens``: token ids in and out over ``/v1/completions`` (training; exact).
    ``chat``: text over ``/v1/chat/completions`` through the OpenAI SDK (hosted
    endpoints for evaluation; no token ids or logprobs)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (never put keys in config files); sent
    in both modes (token mode: to the pool's servers, e.g. ``rstar2 serve``'s secret)."""
    api_key_file: str | None = None
    """File holding the API key (e.g. ``rstar2 serve``'s secret, readable by you
    alone); wins over ``api_key_env``.  A file that is missing or empty (or an empty path) is an error
    naming this field, not a run without a key."""
    connect_timeout_s: PositiveFloat = 10.0
    """TCP connect limit; a dead server is detected this fast."""
    read_timeout_s: PositiveFloat = 3600.0
    """Limit between bytes of a response; long generations are slow but not silent."""
    pool_timeout_s: PositiveFloat = 60.0
    """Wait for a free pooled connection before counting it as an error."""
    max_connections: PositiveInt = 4096
    """Connections per server (the HTTP pool's size, both modes); rollouts keep
    thousands of requests in flight."""
    max_retries: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """Retries of a request to one server on connection errors and 5xx answers.
    Token mode: on the same server, before the pool moves the turn to another (its
    own retry); omit for 1, so that a dead server costs an in-flight turn at most
    ``backoff_initial_s`` before it moves.  Chat mode: the OpenAI SDK's own retries,
    with its own backoff; omit for 5."""
    backoff_initial_s: PositiveFloat = 0.1
    """Token mode: first retry delay; doubles each retry, with jitter."""
    backoff_max_s: PositiveFloat = 0.5
    """Token mode: upper bound on a retry delay."""


class PoolConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The server pool of token mode: how turns are spread over the servers, how a
    dead or hung server is detected, and how long a turn waits for one
    (:class:`backends.ServerPool`, :class:`backends.Dispatcher`; the dispatch
    benchmark, ``benchmarks/dispatch.py``, measured the defaults)."""

    policy: Literal["budget", "round_robin"] = "budget"
    """``budget``: the server with the most free KV budget, a trajectory's later turns
    on its server (prefix-cache hits); ``round_robin``: the static baseline."""
    order: Literal["budget", "session"] | None = None
    """Which waiting turns get room first.  ``budget``: the largest remaining token
    budget (longest work first: the shortest on-policy step); ``session``: the oldest
    trajectory's (streaming: the group the learner waits for finishes first, and new
    groups do not overtake it; ``benchmarks/streaming.py`` measured the difference).
    Omit for ``session`` in streaming mode and ``budget`` otherwise."""
    stall_timeout_s: PositiveFloat | None = 60.0
    """A request whose server streams no new token for this long counts as hung: the
    server is taken out of rotation (until it answers a poll again) and the turn goes
    on on another server from every token it has, those the hung server streamed
    included.  Progress, not duration: a long healthy turn never trips it.  Must
    exceed the longest silence of a healthy server: its first token after a long
    prompt's prefill, or a preempted request's wait (not counted while a weight sync
    holds the servers).  Checked ten times per timeout: seen at most 10% late.  Omit
    to not watch progress."""
    request_timeout_s: PositiveFloat | None = 3600.0
    """Outer bound on one request to one server, however its tokens flow: past it the
    turn goes on on another server from its tokens, and the server stays in rotation
    (slow, not hung: ``stall_timeout_s`` finds hung ones).  Must exceed the longest
    healthy generation (a 12K-token turn at ~10 tokens/s per sequence on a loaded
    server is ~1,200 s).  Omit for no bound (the read timeout still applies)."""
    unavailable_timeout_s: PositiveFloat = 600.0
    """How long a turn waits while no server is up before its trajectory fails."""
    max_failovers: Annotated[int, msgspec.Meta(ge=0)] = 8
    """Resubmissions of one turn to other servers before it fails."""
    poll_interval_s: PositiveFloat = 1.0
    """How often each server's load and health are polled."""
    headroom: Annotated[float, msgspec.Meta(ge=0, le=0.9)] = 0.1
    """Fraction of each server's KV cache kept out of admission: room for sequences
    that outgrow their expected reservation between two polls."""
    hold_headroom: Annotated[float, msgspec.Meta(ge=0, le=0.9)] = 0.04
    """Fraction of each cache kept out of admission even for a trajectory returning to
    the context its server holds for it (such turns may use the rest of ``headroom``)."""
    hold_reports: Annotated[int, msgspec.Meta(ge=0)] = 2
    """For how many of its server's load reports a trajectory's context stays held
    between turns (0: no holds)."""
    affinity_slack: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.25
    """Fraction of a server's capacity by which another server must have more free
    budget before a trajectory's next turn leaves its server (0: no affinity)."""
    affinity_queue_slack: Annotated[int, msgspec.Meta(ge=0)] | None = 8
    """Requests in flight by which a trajectory's server may exceed the least busy
    server that fits the turn before the turn moves; omit to turn the rule off."""
    expected_reservations: bool = True
    """Reserve the running mean generation length per request (rStar2's free-KV
    dispatch: far more concurrency) instead of the whole remaining budget."""
    expected_new_tokens: PositiveInt = 1024
    """The generation length an expected reservation assumes until real ones are seen."""
    reserve_new_tokens: PositiveInt | None = None
    """Cap on the new tokens one request reserves; omit to reserve the whole budget
    (used when ``expected_reservations`` is false)."""
    default_capacity_tokens: PositiveInt = 1 << 20
    """KV capacity assumed for a server until its first load report."""


class LocalServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The engine started for a model directory (``rstar2 eval --model``, training
    without ``[inference]``)."""

    engine: Literal["vllm", "sglang", "transformers"] = "vllm"
    """``vllm`` / ``sglang``: ``num_servers`` server processes (restarted if they die);
    ``transformers``: the model in this process (``backends.TransformersBackend``;
    slow, for small models and tests, where starting a server costs more than it saves)."""
    num_servers: PositiveInt = 1
    """Servers to start; the pool spreads requests over them (one for ``transformers``)."""
    gpu_ids: list[list[int]] = []
    """GPUs of each server (``CUDA_VISIBLE_DEVICES``); empty on CPU."""
    tensor_parallel_size: PositiveInt = 1
    """GPUs per server (vLLM ``--tensor-parallel-size``)."""
    max_model_len: Annotated[int, msgspec.Meta(ge=16)] = 4096
    """Prompt + response limit of the servers, in tokens (also the SFT stage's cut)."""
    kv_cache_gib: PositiveFloat = 1.0
    """CPU KV-cache size in GiB (ignored on GPUs)."""
    extra_args: list[str] = []
    """Further ``vllm serve`` arguments (e.g. ``["--dtype", "bfloat16"]`` on GPUs)."""

    def __post_init__(self) -> None:
        if self.engine == "transformers" and self.num_servers != 1:
            raise ValueError(
                f'server.num_servers: the "transformers" engine runs in this process, one copy; got {self.num_servers}'
            )


class WeightSyncConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How each new version of the weights reaches the inference servers.

    Either way the learner first exports the version to ``<run>/weights/vNNNNNN``:
    ``--resume``, a server the fleet restarts and a server the broadcast failed on
    all load it from there.
    """

    transport: Literal["disk", "broadcast"] = "disk"
    """``disk``: every server reloads the exported directory (the servers must see the
    run directory, e.g. on a shared filesystem).  ``broadcast``: the learner's rank 0
    sends the exported tensors to all servers' workers at once over a collective
    (needs token mode; vLLM servers need ``--weight-transfer-config
    '{"backend": "nccl"}'``, which servers launched by the trainer get)."""
    master_address: str = "127.0.0.1"
    """Broadcast: the rendezvous host, an address of the learner's rank 0 that every
    server can reach (the default suits servers on the learner's node)."""
    master_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    """Broadcast: a free port on ``master_address`` for the rendezvous (required)."""
    ranks_per_server: PositiveInt | list[PositiveInt] | None = None
    """Broadcast: each server's worker count (tensor x pipeline parallel), one number
    for all servers or one per server in ``base_urls`` order; a wrong count hangs the
    rendezvous.  Default: ``server.tensor_parallel_size`` for servers the trainer
    launches; required for external servers ([inference])."""
    sender: Literal["nccl", "gloo"] = "nccl"
    """Broadcast: the collective on rank 0.  ``nccl`` for vLLM on GPUs (rank 0 needs
    CUDA); ``gloo`` only reaches CPU receivers that join a gloo group (tests)."""
    pause_mode: Literal["wait", "abort", "keep"] | None = None
    """``wait``: turns in flight finish on the old weights before the load.
    ``abort``: they stop at once and resume on the new weights (shorter pause; their
    earlier tokens keep the older version).  ``keep`` (vLLM only): they freeze on the
    server and go on after the sync in the same request, their KV computed again on
    the new weights: as ``abort`` without the round trip of each turn.  Default:
    ``wait`` on-policy, ``abort`` in streaming mode."""
    verify: bool = True
    """Check every sync before the servers sample from it: each server scores a fixed
    probe sequence and must match the learner's own log-probs of it within a tolerance
    for the learner's precision (a server that does not is reloaded once, then taken
    out of rotation with an error naming it; with none left the run stops).  The
    servers are checked the same way at start-up, where a model they cannot serve
    exactly is refused.  Costs one forward pass of a few hundred tokens per server and
    one on the learner per sync; ``false`` skips both."""

    timeout_s: PositiveFloat = 300.0
    """Deadline of one sync: a server that has not paused within half of it, or not
    loaded, flushed and versioned within all of it, is taken out of rotation (and
    loaded when it answers again) while the others go on (``sync/timed_out``); a
    broadcast gets half of the time left, the disk loads of the servers it failed
    the rest.  SIGTERM during a sync ends it within seconds.  Must exceed a healthy
    load (a 14B model from a shared filesystem: ~1 min) and, in ``wait`` mode, the
    wait for the turns in flight."""

    def __post_init__(self) -> None:
        if self.transport == "broadcast" and self.master_port is None:
            raise ValueError(
                'weight_sync.master_port: required with transport = "broadcast" (the port the servers '
                "connect to on master_address); set a free port, or use transport = \"disk\""
            )
