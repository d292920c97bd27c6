"""Cold-start SFT (rStar2-Agent's stage 0) on the learner's engine.

rStar2 starts RL from a *non-reasoning* SFT: instruction following and the tool-call
format (``<tool_call>``, ``<tool_response>``, ``<answer>``), without long reasoning,
so that RL is what grows the reasoning. Data: JSONL chat transcripts, one object per
line, ``{"messages": [{"role": ..., "content": ...}, ...]}``; tool results are user (or
``tool``) messages rendered by the model's chat template.

Loss: cross-entropy on assistant tokens only (each assistant message's content and
its end-of-turn token; not the ``<|im_start|>assistant`` header, not system/user/tool
text), token-mean over the batch across ranks, sequences packed exactly as in GRPO.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, final

import msgspec
import torch

from ..errors import DatasetError
from ._learner import Learner
from ._packing import TrainSeq, collate, plan_micro_batches, shard_by_tokens

__all__ = ["SftStats", "encode_chat", "load_chat_jsonl", "run_sft", "sft_step"]


def encode_chat(messages: Sequence[dict[str, Any]], tokenizer: Any, *, max_tokens: int | None = None) -> TrainSeq:
    """Token ids of a rendered transcript and a mask that is 1 on assistant tokens.

    The transcript is rendered once; each assistant message's character span is found
    by rendering the prefix before it (with the generation prompt) and the prefix
    including it, and tokens are masked by their character offsets, so BPE merges
    across the boundary cannot shift the mask. The span ends after the tokenizer's EOS
    (``<|im_end|>`` in ChatML) when the template puts one there.

    Raises:
        ValueError: the template does not render prefixes as prefixes of the whole.
    """
    render = lambda msgs, gen=False: tokenizer.apply_chat_template(  # noqa: E731
        list(msgs), tokenize=False, add_generation_prompt=gen
    )
    text = render(messages)
    spans: list[tuple[int, int]] = []
    eos = tokenizer.eos_token or ""
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        head, upto = render(messages[:i], True), render(messages[: i + 1])
        if not (text.startswith(upto) and upto.startswith(head)):
            raise ValueError("sft: the chat template does not render message prefixes as prefixes")
        end = upto.rfind(eos) + len(eos) if eos and eos in upto[len(head) :] else len(upto)
        spans.append((len(head), end))
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = enc["input_ids"]
    mask = [int(any(a <= s < b for a, b in spans)) for s, _ in enc["offset_mapping"]]
    if max_tokens is not None:
        ids, mask = ids[:max_tokens], mask[:max_tokens]
    return TrainSeq(ids=ids, mask=mask, logprobs=[0.0] * len(ids))


def load_chat_jsonl(
    path: str | Path, tokenizer: Any, *, max_tokens: int | None = None, chat_template: str | Path | None = None
) -> list[TrainSeq]:
    """Encode every transcript of a JSONL file (blank lines skipped) with ``tokenizer``
    (a transformers tokenizer, or the model directory to load it from), and with the
    template file ``chat_template`` instead of its own when given
    (``rollout.chat_template``: SFT and rollouts render alike).

    Raises:
        DatasetError: a line is not ``{"messages": [...]}`` (file and line named).
    """
    if isinstance(tokenizer, (str, Path)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    if chat_template is not None:
        tokenizer.chat_template = Path(chat_template).read_text()
    seqs = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DatasetError(f"{path}:{n}: expected {{\"messages\": [...]}}: {exc}") from None
        seqs.append(encode_chat(messages, tokenizer, max_tokens=max_tokens))
    return seqs


@final
class SftStats(msgspec.Struct, frozen=True):
    """One SFT optimizer step, reduced over ranks."""

    loss: float
    """Token-mean cross-entropy over assistant tokens, before the step."""
    grad_norm: float
    lr: float
    loss_tokens: int
    micro_batches: int
    seconds: float


def sft_step(learner: Learner, seqs: Sequence[TrainSeq]) -> SftStats:
    """One optimizer step of assistant-only cross-entropy on ``seqs`` (every rank
    passes the same list; each trains on its share)."""
    t0 = time.perf_counter()
    mine = [seqs[i] for i in shard_by_tokens([len(s) for s in seqs], learner.world_size)[learner.rank]]
    bins = plan_micro_batches([len(s) for s in mine], learner.config.micro_batch_tokens)
    n_micro = int(learner.all_reduce([len(bins)], op="max")[0])  # equal on all ranks (ZeRO)
    bins += [[]] * (n_micro - len(bins))
    mbs = [collate([mine[i] for i in b]) for b in bins]
    n_tok = learner.all_reduce([sum(mb.num_loss_tokens for mb in mbs)])[0]  # sync point
    loss_sum: torch.Tensor | float = 0.0  # a device tensor: no sync per micro-batch
    for k, mb in enumerate(mbs):
        logp, _ = learner.logprobs(mb)  # [T]
        nll = -(logp * mb.mask.to(logp.device)).sum()
        learner.backward(nll * (learner.world_size / max(n_tok, 1.0)), last=k == n_micro - 1)
        loss_sum = loss_sum + nll.detach()
    step = learner.step()
    total = learner.all_reduce([float(loss_sum)])[0]
    return SftStats(
        loss=total / max(n_tok, 1.0), grad_norm=step["grad_norm"], lr=step["lr"], loss_tokens=int(n_tok),
        micro_batches=n_micro, seconds=time.perf_counter() - t0,
    )  # fmt: skip


def run_sft(
    learner: Learner,
    seqs: Sequence[TrainSeq],
    *,
    epochs: int = 1,
    batch_size: int = 64,
    seed: int = 0,
    on_step: Callable[[int, SftStats], None] | None = None,
) -> list[SftStats]:
    """Shuffled passes over ``seqs`` in batches of ``batch_size`` transcripts, one
    optimizer step per batch (the last, smaller batch included)."""
    rng = random.Random(seed)
    stats = []
    for _ in range(epochs):
        order = list(range(len(seqs)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            st = sft_step(learner, [seqs[i] for i in order[start : start + batch_size]])
            stats.append(st)
            if on_step:
                on_step(len(stats) - 1, st)
    return stats
