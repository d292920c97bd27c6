"""Chunked log-probs equal the whole-logits computation (values, entropy, gradients),
alone and through the learner at ZeRO-0 and ZeRO-3; the start-up check on packed
attention passes with sdpa and eager and refuses a kernel that lets sequences mix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rstar2_async.learn import TrainSeq, collate

pytestmark = pytest.mark.usefixtures("single_process_env")


def naive(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The learner's computation before chunking: whole [T, V] float32 logits."""
    logits = (hidden @ weight.T).float()  # [T, V]
    lse = torch.logsumexp(logits, dim=-1)  # [T]
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse  # [T]
    ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # [T]
    return logp, ent


@pytest.mark.parametrize("chunk", [1, 5, 37, 1000])
@pytest.mark.parametrize("entropy", [True, False])
def test_chunked_equals_naive_in_values_and_gradients(chunk: int, entropy: bool) -> None:
    from rstar2_async.learn._logprobs import chunked_logprobs

    g = torch.Generator().manual_seed(chunk)
    T, H, V = 37, 16, 50
    hidden = torch.randn(T, H, generator=g).requires_grad_()
    weight = (0.3 * torch.randn(V, H, generator=g)).requires_grad_()
    targets = torch.randint(0, V, (T,), generator=g)
    a, b = torch.randn(T, generator=g), torch.randn(T, generator=g)  # upstream gradients

    logp, ent = naive(hidden, weight, targets)
    (logp @ a + (ent @ b if entropy else 0)).backward()
    want = hidden.grad, weight.grad
    hidden.grad = weight.grad = None

    cols = chunked_logprobs(hidden, weight, targets, chunk=chunk, entropy=entropy)  # [T, k]
    assert cols.shape == (T, 2 if entropy else 1) and cols.dtype == torch.float32
    torch.testing.assert_close(cols[:, 0], logp, rtol=1e-5, atol=1e-5)
    if entropy:
        torch.testing.assert_close(cols[:, 1], ent, rtol=1e-5, atol=1e-5)
    (cols[:, 0] @ a + (cols[:, 1] @ b if entropy else 0)).backward()
    torch.testing.assert_close(hidden.grad, want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weight.grad, want[1], rtol=1e-5, atol=1e-5)


def test_bf16_values_are_the_bf16_logits_in_float32() -> None:
    """In bf16 the logits are the matmul's bf16 output, as the model's own head gives
    them; gradients are bf16 (to bf16 rounding: the products are rounded per chunk)."""
    from rstar2_async.learn._logprobs import chunked_logprobs

    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(20, 32, generator=g).bfloat16().requires_grad_()
    weight = torch.randn(64, 32, generator=g).bfloat16().requires_grad_()
    targets = torch.randint(0, 64, (20,), generator=g)
    a, b = torch.randn(20, generator=g), torch.randn(20, generator=g)
    logp, ent = naive(hidden, weight, targets)
    (logp @ a + ent @ b).backward()
    want = hidden.grad, weight.grad
    hidden.grad = weight.grad = None

    cols = chunked_logprobs(hidden, weight, targets, chunk=6, entropy=True)
    torch.testing.assert_close(cols[:, 0], logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cols[:, 1], ent, rtol=1e-5, atol=1e-5)
    (cols[:, 0] @ a + cols[:, 1] @ b).backward()
    assert hidden.grad.dtype == weight.grad.dtype == torch.bfloat16
    torch.testing.assert_close(hidden.grad, want[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(weight.grad, want[1], rtol=2e-2, atol=2e-2)


def _batch():
    g = torch.Generator().manual_seed(3)
    seqs = [
        TrainSeq(ids=torch.randint(0, 32, (n,), generator=g).tolist(), mask=[1] * n, logprobs=[0.0] * n)
        for n in (9, 14, 6)
    ]
    return collate(seqs)


@pytest.mark.parametrize("stage", [0, 3])
def test_learner_logprobs_and_gradients_equal_naive(tiny_lm: Path, stage: int) -> None:
    """Through the real learner (chunks of 7 tokens) against the plain model's whole logits."""
    import deepspeed
    from _learnkit import PARTITION_ALL
    from transformers import AutoModelForCausalLM

    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner

    cfg = LearnerConfig(precision="fp32", zero_stage=stage, gradient_checkpointing=False, logprob_chunk_tokens=7)
    learner = Learner(cfg, tiny_lm, deepspeed_overrides=PARTITION_ALL)
    plain = AutoModelForCausalLM.from_pretrained(tiny_lm, dtype=torch.float32)
    mb = _batch()
    a, b = torch.randn(mb.num_tokens), torch.randn(mb.num_tokens)

    logits = plain(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False).logits[0].float()  # [T, V]
    lse = torch.logsumexp(logits, -1)
    want_logp = logits.gather(-1, mb.targets[:, None]).squeeze(-1) - lse
    want_ent = lse - (torch.softmax(logits, -1) * logits).sum(-1)
    (want_logp @ a + want_ent @ b).backward()

    logp, ent = learner.logprobs(mb, entropy=True)
    assert logp.shape == ent.shape == (mb.num_tokens,)
    torch.testing.assert_close(logp, want_logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, want_ent, rtol=1e-5, atol=1e-5)
    assert learner.logprobs(mb, grad=False)[1] is None
    learner.backward(logp @ a + ent @ b, last=True)
    for name, p in learner.module.named_parameters():
        grad = deepspeed.utils.safe_get_full_grad(p) if stage == 3 else p.grad
        torch.testing.assert_close(grad, plain.get_parameter(name).grad, rtol=1e-5, atol=1e-5, msg=name)


# --- the packed-attention check --------------------------------------------------------


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_attention_check_passes(tiny_lm: Path, attn: str) -> None:
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner
    from rstar2_async.learn._attention import check_packed_attention

    learner = Learner(LearnerConfig(precision="fp32", zero_stage=0, attn_implementation=attn), tiny_lm)  # checks once
    assert learner.module.config._attn_implementation == attn
    err = check_packed_attention(
        lambda mb: learner.logprobs(mb, grad=False)[0], vocab_size=32, name=attn, dtype=torch.float32
    )
    assert err < 1e-5


@pytest.fixture(scope="module")
def leaky() -> str:
    """transformers' own sdpa kernel under a name with no packed-sequence mask: every
    token attends causally to the whole row, as a kernel unaware of packing does."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("leaky_sdpa", sdpa_attention_forward)
    return "leaky_sdpa"


def test_learner_refuses_a_kernel_that_mixes_packed_sequences(
    tiny_lm: Path, leaky: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, _learner

    monkeypatch.setattr(_learner, "checked_attn_implementation", lambda name: leaky)
    with pytest.raises(RuntimeError, match=r"learner\.attn_implementation='leaky_sdpa': packed sequences attend"):
        Learner(LearnerConfig(precision="fp32", zero_stage=0), tiny_lm)


def test_flash_attention_without_flash_attn_names_the_field() -> None:
    import importlib.util

    from rstar2_async.learn._attention import checked_attn_implementation

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here")
    with pytest.raises(ValueError, match=r"learner\.attn_implementation: 'flash_attention_2' needs the flash_attn"):
        checked_attn_implementation("flash_attention_2")
    assert checked_attn_implementation("sdpa") == "sdpa"
