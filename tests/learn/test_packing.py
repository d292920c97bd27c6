"""Packing: bin-packing properties, and packed logits equal unpacked ones."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rstar2_async.learn import TrainSeq, collate, plan_micro_batches, shard_by_tokens


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=60), st.integers(1, 400))
def test_plan_is_a_partition_under_budget(lengths: list[int], budget: int) -> None:
    bins = plan_micro_batches(lengths, budget)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    for b in bins:
        total = sum(lengths[i] for i in b)
        assert total <= budget or len(b) == 1
    # First fit: no item of a later bin would fit into the room left in an earlier one.
    totals = [sum(lengths[i] for i in b) for b in bins]
    for j, b in enumerate(bins):
        for i in range(j):
            assert totals[i] + min(lengths[k] for k in b) > budget
    assert plan_micro_batches(lengths, budget) == bins  # deterministic


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=60), st.integers(1, 4))
def test_shards_balance_tokens(lengths: list[int], world: int) -> None:
    shards = shard_by_tokens(lengths, world)
    assert sorted(i for s in shards for i in s) == list(range(len(lengths)))
    loads = [sum(lengths[i] for i in s) for s in shards]
    # Greedy longest-first: loads differ by at most the longest sequence.
    assert max(loads) - min(loads) <= max(lengths, default=0)


def test_packed_logits_equal_unpacked(tiny_lm) -> None:  # noqa: ANN001
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_lm, dtype=torch.float32, attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(0)
    seqs = [TrainSeq(ids=torch.randint(0, 32, (n,), generator=g).tolist(), mask=[1] * n, logprobs=[0.0] * n) for n in (5, 9, 3)]
    mb = collate(seqs)
    with torch.no_grad():
        packed = model(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False).logits[0]  # [T, V]
        alone = torch.cat([model(input_ids=torch.tensor([s.ids]), use_cache=False).logits[0] for s in seqs])  # [T, V]
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)


def test_empty_micro_batch_has_no_loss_tokens() -> None:
    mb = collate([])
    assert mb.num_tokens == 1 and mb.num_loss_tokens == 0
