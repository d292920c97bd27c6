"""The rollout process's collector settings, and the conversation's shared prompt."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from backends import Completion, TokenIds
from rstar2_async.rollout import GC_GEN0_THRESHOLD, collect_frozen_garbage, tune_gc
from rstar2_async.rollout._conversation import TokenConversation
from rstar2_async.testing import FakeByteTokenizer


@pytest.fixture
def collector() -> Iterator[None]:
    """Leave the collector as the test found it."""
    threshold, callbacks = gc.get_threshold(), list(gc.callbacks)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks[:] = callbacks
        gc.unfreeze()


def test_tune_gc_freezes_what_survives_a_collection(collector: None) -> None:
    tune_gc()
    tune_gc()  # a second call adds no second hook
    assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD
    assert len(gc.callbacks) == len(set(map(id, gc.callbacks)))
    frozen = gc.get_freeze_count()
    alive = [[i] for i in range(1000)]  # young containers that survive the next collection
    gc.collect(0)
    assert gc.get_freeze_count() >= frozen + len(alive)
    assert gc.get_count()[0] < len(alive)  # nothing young left to walk
    cycle: list[object] = []
    cycle.append(cycle)  # made and dropped between two collections: still collected
    del cycle
    assert gc.collect(0) >= 1


class _Node:
    def __init__(self) -> None:
        self.me = self


def test_a_cycle_that_dies_frozen_is_collected_once_a_step(collector: None) -> None:
    tune_gc()
    node = _Node()
    gone = weakref.ref(node)
    gc.collect(0)  # it survives a collection: frozen
    del node  # now garbage, out of the collector's sight
    gc.collect()
    assert gone() is not None  # kept by the freeze
    found, seconds = collect_frozen_garbage(growth=0.0)  # whatever the frozen generation holds
    assert gone() is None and found >= 1 and seconds >= 0
    assert gc.get_freeze_count() > 0  # the survivors are frozen again


def test_the_frozen_are_collected_again_once_they_have_grown_by_the_factor(collector: None) -> None:
    tune_gc()
    collect_frozen_garbage(growth=0.0)
    node = _Node()
    gone = weakref.ref(node)
    gc.collect(0)
    del node  # frozen garbage
    found, _ = collect_frozen_garbage()
    assert found == 0 and gone() is not None  # not grown 2x: not walked
    alive = [[i] for i in range(1000)]
    gc.collect(0)  # frozen: more than the last full collection left
    found, _ = collect_frozen_garbage(growth=1.0)
    assert gone() is None and found >= 1
    assert collect_frozen_garbage(growth=1.0)[0] == 0  # nothing grew since
    del alive


def test_a_conversation_shares_its_prompt_until_it_has_tokens_of_its_own() -> None:
    tokenizer = FakeByteTokenizer()
    prompt = [1, 2, 3]
    a = TokenConversation(None, tokenizer, prompt, "a")  # type: ignore[arg-type]
    b = TokenConversation(None, tokenizer, prompt, "b")  # type: ignore[arg-type]
    assert a.ids is prompt and b.ids is prompt
    a.record(Completion(token_ids=[7, 8], logprobs=[-0.5, -0.5], finish_reason="stop"))
    b.append_tool_turn(([9], "x"))
    assert prompt == [1, 2, 3]  # never mutated
    assert (a.ids, a.response_ids, a.length) == ([1, 2, 3, 7, 8], [7, 8], 2)
    assert isinstance(a.ids, TokenIds) and a.ids.json() == b"[1,2,3,7,8]"  # what the next request sends
    assert (b.ids, b.response_ids, b.loss_mask) == ([1, 2, 3, 9], [9], [0])
    a.append_tool_turn(([9], "x"))
    assert a.ids == [1, 2, 3, 7, 8, 9] and a.loss_mask == [1, 1, 0] and prompt == [1, 2, 3]
