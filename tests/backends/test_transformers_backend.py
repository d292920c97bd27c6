"""TransformersBackend against a real tiny Qwen2 built here (no downloads, no fakes).

The reference for every exactness check is transformers itself: ``model.generate``
for greedy tokens, one full forward over prompt + completion for logprobs.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import anyio.from_thread
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from backends import (
    BackendClosed,
    Completion,
    RequestRejected,
    SamplingParams,
    ServerLoad,
    TransformersBackend,
    TransformersStatistics,
)

pytestmark = pytest.mark.anyio

PROMPTS = ([1, 2, 3], [5, 9, 11, 13, 2, 7], [40])
GREEDY = SamplingParams(temperature=0.0)
N = 16  # tokens per generation: the whole file stays at a few seconds


@dataclass(frozen=True)
class Tiny:
    dir: Path
    eos: int
    model: object
    """The same weights as ``dir``, in memory: the reference."""


def _build(seed: int, eos: int | None = None) -> object:
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=1, num_key_value_heads=1,
        intermediate_size=128, tie_word_embeddings=False, max_position_embeddings=256, eos_token_id=eos,
    )  # fmt: skip
    return transformers.Qwen2ForCausalLM(config).eval()


def _reference(model: object, prompt: list[int], n: int = N, eos: int | None = None) -> list[int]:
    ids = torch.tensor([prompt])
    kwargs = {"eos_token_id": eos, "pad_token_id": eos} if eos is not None else {}
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, **kwargs)
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    """A random model whose EOS is a token its greedy outputs never reach, so greedy
    generations run to ``max_tokens`` (tests that want EOS choose another one)."""
    model = _build(0)
    model.generation_config.eos_token_id = None
    used = {t for p in PROMPTS for t in p + _reference(model, p)}
    eos = max(set(range(64)) - used)
    model.config.eos_token_id = model.generation_config.eos_token_id = eos
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    return Tiny(path, eos, model)


@contextmanager
def after_forwards(n: int) -> Iterator[anyio.Event]:
    """An event set once a causal LM (the backend's) has run ``n`` forwards.

    A global torch forward hook, run in the backend's worker thread, sets it through
    ``anyio.from_thread``: the test waits for real progress, with no sleep and no
    polling (the n-th token is sampled just after; its step may still be running).
    """
    event, count = anyio.Event(), 0

    def hook(module: object, args: object, output: object) -> None:
        nonlocal count
        if isinstance(module, transformers.Qwen2ForCausalLM):
            count += 1
            if count == n:
                anyio.from_thread.run_sync(event.set)

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        yield event
    finally:
        handle.remove()


# -- exactness ---------------------------------------------------------------------------


async def test_greedy_equals_generate_and_logprobs_equal_a_full_forward(tiny: Tiny) -> None:
    async with TransformersBackend(tiny.dir) as backend:
        for prompt in PROMPTS:
            c = await backend.generate(prompt, max_tokens=N, sampling=GREEDY)
            assert c.token_ids == _reference(tiny.model, prompt, eos=tiny.eos)
            assert c.finish_reason == "length" and len(c.logprobs) == N
            with torch.inference_mode():
                logits = tiny.model(torch.tensor([prompt + c.token_ids])).logits[0].float()
            expected = logits.log_softmax(-1)[len(prompt) - 1 : -1].gather(1, torch.tensor(c.token_ids)[:, None])
            assert torch.allclose(torch.tensor(c.logprobs), expected[:, 0], atol=1e-5, rtol=0)


async def test_logprobs_are_raw_whatever_the_sampling(tiny: Tiny) -> None:
    """Temperature and top-k change what is sampled, never the logprob reported."""
    prompt = PROMPTS[1]
    async with TransformersBackend(tiny.dir) as backend:
        c = await backend.generate(prompt, max_tokens=N, sampling=SamplingParams(temperature=0.3, top_k=5, seed=1))
    with torch.inference_mode():
        logits = tiny.model(torch.tensor([prompt + c.token_ids])).logits[0].float()
    expected = logits.log_softmax(-1)[len(prompt) - 1 : -1].gather(1, torch.tensor(c.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-5, rtol=0)


async def test_seeded_sampling_is_reproducible_and_top_k_1_or_tiny_top_p_is_greedy(tiny: Tiny) -> None:
    prompt = PROMPTS[0]
    async with TransformersBackend(tiny.dir) as backend:

        async def sample(**kw: object) -> list[int]:
            return (await backend.generate(prompt, max_tokens=N, sampling=SamplingParams(**kw))).token_ids

        a, b, other = await sample(seed=7), await sample(seed=7), await sample(seed=8)
        assert a == b and a != other
        greedy = await sample(temperature=0.0)
        assert await sample(top_k=1) == greedy
        assert await sample(top_p=1e-6, seed=3) == greedy
        assert await sample(temperature=1e-4, seed=3) == greedy  # a scaled softmax is near one-hot


async def test_eos_stops_with_the_eos_token_included(tiny: Tiny, tmp_path: Path) -> None:
    greedy = _reference(tiny.model, PROMPTS[0], eos=tiny.eos)
    eos = greedy[2]  # the third greedy token becomes EOS (it may come earlier: cut at its first)
    for name in ("config.json", "generation_config.json"):
        body = json.loads((tiny.dir / name).read_text())
        (tmp_path / name).write_text(json.dumps(body | {"eos_token_id": [eos, tiny.eos]}))
    shutil.copy(tiny.dir / "model.safetensors", tmp_path)
    async with TransformersBackend(tmp_path) as backend:
        c = await backend.generate(PROMPTS[0], max_tokens=N, sampling=GREEDY)
        assert c.finish_reason == "stop"
        assert c.token_ids == greedy[: greedy.index(eos) + 1] and len(c.logprobs) == len(c.token_ids)
        short = await backend.generate(PROMPTS[1], max_tokens=1, sampling=GREEDY)
        assert len(short.token_ids) == 1


async def test_max_tokens_gives_length_with_exactly_that_many(tiny: Tiny) -> None:
    async with TransformersBackend(tiny.dir) as backend:
        for n in (1, 2, 7):
            c = await backend.generate(PROMPTS[2], max_tokens=n, sampling=SamplingParams(seed=n))
            assert (c.finish_reason, len(c.token_ids), len(c.logprobs)) == ("length", n, n)


async def test_bad_requests_are_rejected(tiny: Tiny) -> None:
    async with TransformersBackend(tiny.dir, max_model_len=32) as backend:
        for prompt, n, sampling in [
            ([], 4, GREEDY), ([64], 4, GREEDY), ([-1], 4, GREEDY), ([1], 0, GREEDY),
            ([1], 4, SamplingParams(top_p=0.0)), ([1], 4, SamplingParams(top_k=0)),
            ([1], 4, SamplingParams(temperature=-1.0)),
        ]:  # fmt: skip
            with pytest.raises(RequestRejected) as info:
                await backend.generate(prompt, max_tokens=n, sampling=sampling)
            assert info.value.status == 400
        assert (await backend.generate([1] * 29, max_tokens=3, sampling=GREEDY)).finish_reason == "length"


async def test_max_tokens_is_clamped_to_the_context(tiny: Tiny) -> None:
    async with TransformersBackend(tiny.dir, max_model_len=32) as backend:
        over = await backend.generate([1] * 30, max_tokens=3, sampling=GREEDY)  # 2 tokens of room
        full = await backend.generate([1] * 32, max_tokens=3, sampling=GREEDY)
    assert over.finish_reason == "length" and len(over.token_ids) <= 2
    assert (full.token_ids, full.finish_reason) == ([], "length")


# -- concurrency, cancellation ---------------------------------------------------------------


async def test_concurrent_generations_equal_their_sequential_results(tiny: Tiny) -> None:
    requests = [(p, s) for p in PROMPTS for s in (GREEDY, SamplingParams(seed=11, top_p=0.9))]
    async with TransformersBackend(tiny.dir) as backend:
        sequential = [await backend.generate(p, max_tokens=N, sampling=s) for p, s in requests]
        concurrent: dict[int, Completion] = {}

        async def one(i: int) -> None:
            concurrent[i] = await backend.generate(requests[i][0], max_tokens=N, sampling=requests[i][1])

        await backend.pause()  # queue them all, then let them go at once
        async with anyio.create_task_group() as tg:
            for i in range(len(requests)):
                tg.start_soon(one, i)
            await anyio.wait_all_tasks_blocked()  # reliable here: no model step is running
            assert backend.statistics().waiting == len(requests)
            await backend.resume()
        assert [concurrent[i] for i in range(len(requests))] == sequential
        assert backend.statistics().requests == 2 * len(requests)


async def test_cancelling_a_generation_stops_it_and_leaves_the_backend_usable(tiny: Tiny) -> None:
    async with TransformersBackend(tiny.dir) as backend:
        with anyio.CancelScope() as scope, after_forwards(3) as third:
            async with anyio.create_task_group() as tg:

                async def cancel_at_the_third_token() -> None:
                    await third.wait()
                    scope.cancel()

                tg.start_soon(cancel_at_the_third_token)
                await backend.generate(PROMPTS[0], max_tokens=200, sampling=GREEDY)
                pytest.fail("the generation was not cancelled")
        assert scope.cancelled_caught
        stats = backend.statistics()
        assert stats.in_flight == 0 and stats.requests == 0 and 2 <= stats.generated_tokens <= 3
        c = await backend.generate(PROMPTS[0], max_tokens=N, sampling=GREEDY)
        assert c.token_ids == _reference(tiny.model, PROMPTS[0], eos=tiny.eos)
        assert await backend.load() == ServerLoad(capacity_tokens=1 << 30, used_tokens=0, running=0, waiting=0)


# -- admin: pause, resume ------------------------------------------------------------------


async def test_pause_abort_ends_in_flight_with_a_prefix_and_holds_new_until_resume(tiny: Tiny) -> None:
    prompt, greedy = PROMPTS[1], _reference(tiny.model, PROMPTS[1], eos=tiny.eos)
    async with TransformersBackend(tiny.dir) as backend:
        results: dict[str, Completion] = {}
        done = {"first": anyio.Event(), "held": anyio.Event()}

        async def run(name: str) -> None:
            results[name] = await backend.generate(prompt, max_tokens=N, sampling=GREEDY)
            done[name].set()

        async with anyio.create_task_group() as tg:
            with after_forwards(3) as third:
                tg.start_soon(run, "first")
                await third.wait()
                await backend.pause("abort")  # returns once the in-flight one has ended
            assert done["first"].is_set()
            first = results["first"]
            assert first.finish_reason == "abort" and 2 <= len(first.token_ids) <= 3
            assert first.token_ids == greedy[: len(first.token_ids)] and len(first.logprobs) == len(first.token_ids)

            tg.start_soon(run, "held")
            await anyio.wait_all_tasks_blocked()
            assert backend.statistics().waiting == 1
            assert not done["held"].is_set() and backend.statistics().paused
            assert (await backend.load()).waiting == 1
            await backend.resume()
            await done["held"].wait()
        assert results["held"].finish_reason == "length" and results["held"].token_ids == greedy


async def start_greedy(backend: TransformersBackend, tg: anyio.abc.TaskGroup, results: list[Completion]) -> None:
    """Start one greedy generation in ``tg`` and return once it is two tokens in."""

    async def run() -> None:
        results.append(await backend.generate(PROMPTS[0], max_tokens=N, sampling=GREEDY))

    with after_forwards(2) as second:
        tg.start_soon(run)
        await second.wait()


async def test_pause_wait_lets_in_flight_finish(tiny: Tiny) -> None:
    async with TransformersBackend(tiny.dir) as backend:
        results: list[Completion] = []
        async with anyio.create_task_group() as tg:
            await start_greedy(backend, tg, results)
            await backend.pause("wait")
            assert [c.finish_reason for c in results] == ["length"] and len(results[0].token_ids) == N
            assert backend.statistics() == TransformersStatistics(
                requests=1, generated_tokens=N, in_flight=0, waiting=0, paused=True, weight_version=0
            )
            await backend.resume()
            await backend.resume()  # a no-op when not paused


# -- admin: weights and versions ----------------------------------------------------------------


def _save_sharded(state: dict[str, object], directory: Path) -> None:
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        safetensors_torch.save_file({n: state[n].contiguous() for n in part}, str(directory / file))
    index = {"metadata": {}, "weight_map": {n: f for f, part in shards.items() for n in part}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("layout", ["single", "sharded"])
async def test_load_weights_from_disk_replaces_every_weight(tiny: Tiny, tmp_path: Path, layout: str) -> None:
    other = _build(1, eos=tiny.eos)
    state = {n: t.detach().clone() for n, t in other.state_dict().items()}
    new, bad, short = tmp_path / "new", tmp_path / "bad", tmp_path / "short"
    for d in (new, bad, short):
        d.mkdir()
    if layout == "single":
        safetensors_torch.save_file(state, str(new / "model.safetensors"))
    else:
        _save_sharded(state, new)
    safetensors_torch.save_file(state | {"lm_head.weight": torch.zeros(3, 64)}, str(bad / "model.safetensors"))
    safetensors_torch.save_file(
        {n: t for n, t in state.items() if n != "lm_head.weight"}, str(short / "model.safetensors")
    )
    before = _reference(tiny.model, PROMPTS[0], eos=tiny.eos)
    after = _reference(other, PROMPTS[0], eos=tiny.eos)
    assert before != after

    async with TransformersBackend(tiny.dir) as backend:
        for wrong, message in [
            (bad, "shape"),
            (short, "lm_head.weight: missing"),
            (tmp_path / "none", "none/model.safetensors"),
        ]:
            with pytest.raises(RequestRejected, match=message):
                await backend.load_weights_from_disk(str(wrong))
            assert (await backend.generate(PROMPTS[0], max_tokens=N, sampling=GREEDY)).token_ids == before
        await backend.pause("wait")
        await backend.load_weights_from_disk(str(new))
        await backend.reset_prefix_cache()
        await backend.resume()
        assert (await backend.generate(PROMPTS[0], max_tokens=N, sampling=GREEDY)).token_ids == after


async def test_a_load_waits_for_unpaused_generations_so_none_mixes_weights(tiny: Tiny, tmp_path: Path) -> None:
    other = _build(1, eos=tiny.eos)
    safetensors_torch.save_file(dict(other.state_dict()), str(tmp_path / "model.safetensors"))
    async with TransformersBackend(tiny.dir) as backend:
        results: list[Completion] = []
        async with anyio.create_task_group() as tg:
            await start_greedy(backend, tg, results)
            await backend.load_weights_from_disk(str(tmp_path))
            assert len(results) == 1  # it finished first, on the old weights
        assert results[0].token_ids == _reference(tiny.model, PROMPTS[0], eos=tiny.eos)
        after = await backend.generate(PROMPTS[0], max_tokens=N, sampling=GREEDY)
        assert after.token_ids == _reference(other, PROMPTS[0], eos=tiny.eos)


async def test_bfloat16_generates(tiny: Tiny) -> None:
    async with TransformersBackend(tiny.dir, dtype="bfloat16") as backend:
        c = await backend.generate(PROMPTS[0], max_tokens=N, sampling=SamplingParams(seed=0))
    assert len(c.token_ids) == N and all(-math.inf < lp <= 0 for lp in c.logprobs)


async def test_versions_round_trip_and_stamp_completions(tiny: Tiny) -> None:
    async with TransformersBackend(tiny.dir) as backend:
        assert await backend.weight_version() == "default"
        assert (await backend.generate([1], max_tokens=1, sampling=GREEDY)).weight_version == 0
        await backend.set_weight_version(3)
        assert await backend.weight_version() == "3"
        await backend.set_weight_version("4")  # as the weight sync passes it: str(version)
        assert await backend.weight_version() == "4" and backend.statistics().weight_version == 4
        assert (await backend.generate([1], max_tokens=1, sampling=GREEDY)).weight_version == 4
        for wrong in (-1, "v5", True):
            with pytest.raises(ValueError):
                await backend.set_weight_version(wrong)


# -- lifecycle ------------------------------------------------------------------------------------


async def test_lifecycle_misuse_and_close(tiny: Tiny) -> None:
    backend = TransformersBackend(tiny.dir)
    assert not await backend.health()
    with pytest.raises(RuntimeError, match="UNOPENED"):
        await backend.generate([1], max_tokens=1, sampling=GREEDY)
    async with backend:
        assert await backend.health()
        with pytest.raises(RuntimeError, match="OPEN"):
            await backend.__aenter__()
        await backend.pause()
        held: list[BaseException] = []

        async def generate_while_paused() -> None:
            try:
                await backend.generate([1], max_tokens=1, sampling=GREEDY)
            except BackendClosed as exc:
                held.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(generate_while_paused)
            await anyio.wait_all_tasks_blocked()
            assert backend.statistics().waiting == 1
            await backend.__aexit__(None, None, None)  # closing wakes the held generation
        assert len(held) == 1
    assert not await backend.health()
    with pytest.raises(BackendClosed):
        await backend.generate([1], max_tokens=1, sampling=GREEDY)
    with pytest.raises(BackendClosed):
        await backend.pause()
    with pytest.raises(RuntimeError, match="CLOSED"):
        await backend.__aenter__()


async def test_a_model_that_cannot_load_is_a_launch_error(tmp_path: Path) -> None:
    from backends import LaunchError

    with pytest.raises(LaunchError):
        async with TransformersBackend(tmp_path):
            pass


def test_import_backends_does_not_import_torch() -> None:
    code = (
        "import sys, backends; print(sorted(m for m in ('torch', 'transformers', 'safetensors') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
