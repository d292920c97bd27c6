"""Typed configuration of the rollout side: one Struct per section.

Each field carries its reason in a docstring and its bounds in ``msgspec.Meta``;
:func:`rstar2_async.configio.convert` turns violations into messages that name the
dotted field and the value given.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]


class SamplingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Sampling parameters sent with every generation request.  Always explicit:
    evaluation numbers are meaningless without them."""

    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] = 1.0
    """Softmax temperature; 0 is greedy."""
    top_p: Annotated[float, msgspec.Meta(gt=0, le=1)] = 1.0
    """Nucleus sampling mass."""
    top_k: Annotated[int, msgspec.Meta(ge=-1)] = -1
    """Top-k cut-off; -1 disables it."""
    seed: int | None = None
    """Per-request seed base; the sample index is added so samples differ."""


class RolloutConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How one trajectory runs and how many run at once."""

    max_turns: PositiveInt = 5
    """Assistant turns per trajectory (rStar2 stage 1: 5)."""
    max_response_tokens: PositiveInt = 8192
    """Budget for everything after the prompt, model and tool tokens alike; each turn
    may generate only what is left of it (rStar2: 8K in stage 1, 12K in stage 2)."""
    max_in_flight: PositiveInt = 1024
    """Admission bound: trajectories running at once.  Others wait in FIFO order."""
    trajectory_timeout_s: PositiveFloat = 1800.0
    """Wall-clock budget of one trajectory; past it the trajectory ends as ``timeout``."""
    tool_timeout_s: PositiveFloat = 4.0
    """Wall-clock limit of one tool call in the sandbox (rStar2: 4 s)."""
    max_tool_calls_per_turn: PositiveInt = 4
    """Calls beyond this in one turn get a tool error instead of running."""
    max_tool_output_chars: PositiveInt = 2048
    """Tool output longer than this is cut in the middle, keeping head and tail."""
    system_prompt: str | None = None
    """Replaces the built-in rStar2-style system prompt (the tool list is appended)."""
    list_tools: bool = True
    """Append the tool list (``<tools>`` JSON) to the system prompt.  Off for a model
    fine-tuned on the one fixed tool, where it only lengthens every prompt."""
    sampling: SamplingConfig = msgspec.field(default_factory=SamplingConfig)


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
    """Environment variable holding the API key (never put keys in config files)."""
    connect_timeout_s: PositiveFloat = 10.0
    """TCP connect limit; a dead server is detected this fast."""
    read_timeout_s: PositiveFloat = 3600.0
    """Limit between bytes of a response; long generations are slow but not silent."""
    pool_timeout_s: PositiveFloat = 60.0
    """Wait for a free pooled connection before counting it as an error."""
    max_connections: PositiveInt = 4096
    """Connections per server; rollouts keep thousands of requests in flight."""
    max_retries: Annotated[int, msgspec.Meta(ge=0)] = 5
    """Retries of a request on connection errors and 5xx answers."""
    backoff_initial_s: PositiveFloat = 0.5
    """First retry delay; doubles each retry, with jitter."""
    backoff_max_s: PositiveFloat = 30.0
    """Upper bound on a retry delay."""


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
    pause_mode: Literal["wait", "abort"] = "wait"
    """``wait``: turns in flight finish on the old weights before the load.
    ``abort``: they stop at once and resume on the new weights (shorter pause; their
    earlier tokens keep the older version)."""

    def __post_init__(self) -> None:
        if self.transport == "broadcast" and self.master_port is None:
            raise ValueError(
                'weight_sync.master_port: required with transport = "broadcast" (the port the servers '
                "connect to on master_address); set a free port, or use transport = \"disk\""
            )
