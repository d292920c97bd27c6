"""Variable-length packing: trajectories into micro-batches under a token budget.

Padding every sequence to the longest in the batch wastes most of the compute on
agentic rollouts, whose lengths are long-tailed (a few 8K-token trajectories among
many short ones). Instead, sequences are concatenated into one row per micro-batch,
each with its own ``position_ids`` starting at 0; transformers turns the position
resets into a block-diagonal causal mask (``masking_utils.find_packed_sequence_indices``,
sdpa/eager/flash alike), so packed logits equal unpacked ones (the learner checks
this at start-up with its attention kernel: ``_attention``).

Planning (which sequences go together, which rank gets what) is pure Python;
:func:`collate` builds the tensors. Targets are aligned at collate time: position
``j`` of a sequence predicts token ``j + 1``, so every per-token tensor here is
indexed by the *predicting* position and the last position of each sequence has
mask 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

import torch

__all__ = ["MicroBatch", "TrainSeq", "collate", "plan_micro_batches", "shard_by_tokens"]


@final
@dataclass(frozen=True, slots=True)
class TrainSeq:
    """One sequence to train on: the prompt and the response, token-in/token-out.

    Invariants: ``len(ids) == len(mask) == len(logprobs)``; ``mask[i]`` is 1 where
    ``ids[i]`` is a token the policy generated (it gets a loss), 0 for prompt,
    tool-response and template tokens; ``logprobs[i]`` is the sampling logprob of
    ``ids[i]`` (0.0 where the mask is 0). ``group`` identifies the GRPO group.
    ``current`` (None: the mask) is 1 where a trained token was sampled by the weights
    the learner holds: the train/inference mismatch is measured there only, since a
    stale token's logprob differs by the policy's drift, not only by the sync.
    """

    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    advantage: float = 0.0
    group: int = 0
    current: list[int] | None = None

    def __post_init__(self) -> None:
        assert len(self.ids) == len(self.mask) == len(self.logprobs), (
            f"TrainSeq: ids/mask/logprobs lengths differ: {len(self.ids)}, {len(self.mask)}, {len(self.logprobs)}"
        )
        assert self.current is None or len(self.current) == len(self.ids), "TrainSeq: current's length differs"

    def __len__(self) -> int:
        return len(self.ids)


@final
@dataclass(frozen=True, slots=True)
class MicroBatch:
    """Packed tensors of one micro-batch; T is the sum of the sequence lengths."""

    input_ids: torch.Tensor  # [1, T] int64
    position_ids: torch.Tensor  # [1, T] int64, restarting at 0 for each sequence
    targets: torch.Tensor  # [T] int64, the next token (0 at each sequence's end)
    mask: torch.Tensor  # [T] float32, 1 where the target is a trained token
    old_logprobs: torch.Tensor  # [T] float32, sampling logprob of the target
    advantages: torch.Tensor  # [T] float32, the sequence's advantage, repeated
    seq_lens: tuple[int, ...]
    current: torch.Tensor  # [T] float32, 1 where the target is trained and was sampled by the learner's weights

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def num_loss_tokens(self) -> int:
        return int(self.mask.sum().item())

    def to(self, device: torch.device | str) -> MicroBatch:
        return MicroBatch(
            self.input_ids.to(device), self.position_ids.to(device), self.targets.to(device),
            self.mask.to(device), self.old_logprobs.to(device), self.advantages.to(device), self.seq_lens,
            self.current.to(device),
        )  # fmt: skip


def plan_micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """First-fit decreasing bin packing of sequence lengths under ``budget`` tokens.

    Returns bins of indices into ``lengths``; every index appears exactly once; a bin's
    total is <= ``budget`` unless it holds a single sequence longer than the budget.
    Deterministic (ties broken by index). FFD uses at most 11/9 OPT + 1 bins.
    """
    assert budget >= 1, f"plan_micro_batches: budget must be >= 1, got {budget}"
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(budget - n)
    return bins


def shard_by_tokens(lengths: Sequence[int], world_size: int) -> list[list[int]]:
    """Deal sequences to ranks so token counts balance (longest first, to the
    lightest rank). Returns one index list per rank, each in ascending order."""
    shards: list[list[int]] = [[] for _ in range(world_size)]
    load = [0] * world_size
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(world_size), key=lambda r: (load[r], r))
        shards[r].append(i)
        load[r] += lengths[i]
    return [sorted(s) for s in shards]


def collate(seqs: Sequence[TrainSeq]) -> MicroBatch:
    """Concatenate ``seqs`` into one packed row with next-token targets.

    An empty ``seqs`` gives a one-token micro-batch with mask 0: ranks that run out of
    data still run forward/backward so ZeRO's collectives stay matched.
    """
    if not seqs:
        seqs = [TrainSeq(ids=[0], mask=[0], logprobs=[0.0])]
    ids: list[int] = []
    pos: list[int] = []
    tgt: list[int] = []
    mask: list[int] = []
    old: list[float] = []
    adv: list[float] = []
    cur: list[int] = []
    for s in seqs:
        n = len(s)
        ids += s.ids
        pos += range(n)
        # Position j predicts token j + 1; the last position predicts nothing.
        tgt += s.ids[1:] + [0]
        mask += s.mask[1:] + [0]
        old += s.logprobs[1:] + [0.0]
        adv += [s.advantage] * n
        cur += (s.mask if s.current is None else s.current)[1:] + [0]
    return MicroBatch(
        input_ids=torch.tensor([ids], dtype=torch.long),  # [1, T]
        position_ids=torch.tensor([pos], dtype=torch.long),  # [1, T]
        targets=torch.tensor(tgt, dtype=torch.long),  # [T]
        mask=torch.tensor(mask, dtype=torch.float32),  # [T]
        old_logprobs=torch.tensor(old, dtype=torch.float32),  # [T]
        advantages=torch.tensor(adv, dtype=torch.float32),  # [T]
        seq_lens=tuple(len(s) for s in seqs),
        current=torch.tensor(cur, dtype=torch.float32),  # [T]
    )
