"""Typed configuration of one trajectory and of the engine that runs many: turns,
token budget, tools, sampling, admission.

Each field carries its reason in a docstring and its bounds in ``msgspec.Meta``;
:func:`rstar2_async.config.convert` turns violations into messages that name the
dotted field and the value given.
"""

from __future__ import annotations

from typing import Annotated

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
    """Seeds every request of a call: each is seeded from this, the problem, the sample
    and the turn (hashed: ``rstar2_async.rollout._seeds``), so the same call samples the
    same tokens again where the engine allows it.  ``None``: unseeded.  ``rstar2 eval
    --seed`` sets it; a training run's rollouts ignore it and seed from ``run.seed``,
    the stage and the step instead."""


class RolloutConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How one trajectory runs and how many run at once."""

    max_turns: PositiveInt = 5
    """Assistant turns per trajectory (rStar2 stage 1: 5)."""
    max_response_tokens: PositiveInt = 8192
    """Budget for everything after the prompt, model and tool tokens alike; each turn
    may generate only what is left of it (rStar2: 8K in stage 1, 12K in stage 2)."""
    max_in_flight: PositiveInt = 1024
    """Admission bound: trajectories running at once over every call of the run's one
    engine (a rollout running ahead and an evaluation share it).  Others wait in
    FIFO order."""
    shards: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Worker processes the rollout runs in (``rstar2_async.rollout.ShardedEngine``).
    0: in the run's own process.  N >= 1: N workers, each with its own engine, a
    server pool over its share of the servers (server i goes to worker i mod N, so N
    may not exceed the servers), and ``ceil(x / N)`` of each of ``max_in_flight``,
    ``sandbox.workers`` and ``reward.workers`` (each worker also keeps its own
    ``sandbox.spares``).  Shards take the rollout's event loop off the learner's
    process (their GIL is not the learner's) and let a large rollout use several
    cores; the run's process keeps the weight sync, the records and health polls.
    Token mode only (not chat endpoints, nor the in-process ``transformers`` engine);
    ``rstar2 eval`` honours it too; exported weights record 0 (not a setting of theirs)."""
    trajectory_timeout_s: PositiveFloat = 1800.0
    """Wall-clock budget of one trajectory; past it the trajectory ends as ``timeout``."""
    infra_rerolls: Annotated[int, msgspec.Meta(ge=0)] = 2
    """How many times a sample whose trajectory stopped at an infrastructure failure
    (``Trajectory.infra_failure``: generation failovers exhausted, a tool call the
    sandbox failed) is rolled again from the start, in its slot of the group.  If the
    last try fails too, the sample stays marked and GRPO-RoC drops its group.  Each
    try costs what the trajectory generated before the failure; the run's circuit
    breaker (``run.max_infra_failed_rate``) stops a run whose failures persist."""
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
    chat_template: str | None = None
    """A Jinja chat template file that replaces the model's own in token mode (and for
    the SFT stage's transcripts), for a model whose template cannot express tool
    results (it raises on a ``tool`` message, leaves its text out, or frames it
    differently from turn to turn: the start-up error says which).  It must render
    ``tool`` messages; omitted: the model directory's ``chat_template.jinja``,
    ``chat_template.json`` or ``tokenizer_config.json``.  A chat endpoint applies its
    own template: setting this in chat mode is an error."""
    sampling: SamplingConfig = msgspec.field(default_factory=SamplingConfig)
    """Sampling of every generation (an evaluation or a stage may pass its own)."""
    tools: Annotated[list[str], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["rstar2_async.rollout.tools:python"]
    )
    """The tools the model may call, each a ``"module:name"`` import path of a
    :class:`rstar2_async.rollout.Tool` (or of a class or function that makes one).
    Shipped: ``rstar2_async.rollout.tools:python`` (stateless, ``code`` and ``input``)
    and ``rstar2_async.rollout.tools:jupyter`` (rStar2's notebook-style Python: each
    call sees the variables of the trajectory's earlier calls).  The system prompt
    lists the tools in this order."""


def shard_share(total: int, shards: int) -> int:
    """One worker's share of ``total`` over ``shards`` workers (``rollout.shards``):
    ``ceil(total / shards)``, so that no bound is lowered by the split."""
    return -(-total // shards)


def check_shards(shards: int, servers: int, where: str) -> None:
    """``rollout.shards`` against the number of servers (``where`` names their field).

    Raises:
        ValueError: more workers than servers (a worker would have none).
    """
    if shards > servers:
        raise ValueError(
            f"rollout.shards: {shards} workers for {servers} servers ({where}): each worker needs a server "
            f"of its own; set rollout.shards <= {servers}"
        )
