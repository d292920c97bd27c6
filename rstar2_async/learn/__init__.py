"""Step 6 of an RL step: the learner, the one sub-package that imports torch and DeepSpeed.

:class:`Learner` wraps the policy in a DeepSpeed engine (ZeRO 0-3, CPU with gloo or
GPUs with NCCL) and gives the primitives of an update: token logprobs (chunk by
chunk through the output layer, :func:`chunked_logprobs`, ``_logprobs``), backward,
optimizer step.  On them: :func:`grpo_step` (GRPO's group-normalised advantages and
the token-mean clipped loss, ``_grpo``), :func:`sft_step` (the cold start, ``_sft``),
both over micro-batches packed under a token budget (``_packing``).  The learner's
state leaves through :func:`save_hf_checkpoint` (weights vLLM and transformers load,
``_export``; or :func:`gather_export` to write them while a broadcast sends them) and :func:`save_checkpoint` / :func:`load_checkpoint` (exact resume,
``_checkpoint``).  :class:`LearnerDriver` makes every rank run the same call
(``_driver``).  Those modules import ``_learner``; it imports none of them.
"""

from ._checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from ._driver import LearnerDriver, follow
from ._export import TOKENIZER_FILES, PendingExport, gather_export, iter_weight_buckets, save_hf_checkpoint
from ._grpo import (
    GrpoStats,
    group_advantages,
    grpo_step,
    logprob_diff,
    policy_loss,
    sequences_from_groups,
)
from ._learner import Learner, barrier, init_distributed, seed_everything
from ._logprobs import chunked_logprobs
from ._packing import MicroBatch, TrainSeq, collate, plan_micro_batches, shard_by_tokens
from ._probe import probe_logprobs
from ._sft import SftStats, encode_chat, load_chat_jsonl, run_sft, sft_step

__all__ = [
    "GrpoStats",
    "Learner",
    "LearnerDriver",
    "MicroBatch",
    "PendingExport",
    "SftStats",
    "TOKENIZER_FILES",
    "TrainSeq",
    "barrier",
    "chunked_logprobs",
    "collate",
    "encode_chat",
    "follow",
    "gather_export",
    "group_advantages",
    "grpo_step",
    "init_distributed",
    "iter_weight_buckets",
    "latest_checkpoint",
    "load_chat_jsonl",
    "load_checkpoint",
    "logprob_diff",
    "plan_micro_batches",
    "policy_loss",
    "probe_logprobs",
    "run_sft",
    "save_checkpoint",
    "save_hf_checkpoint",
    "seed_everything",
    "sequences_from_groups",
    "sft_step",
    "shard_by_tokens",
]
