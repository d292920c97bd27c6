"""Token log-probs and entropies from the last hidden states, chunk by chunk through
the output layer, so that no [T, V] tensor is ever held whole.

At the paper's size (vocabulary 151,936, 32K-token micro-batches) the float32 logits
of one micro-batch take 19.9 GB, and the softmax of the entropy as much again, on top
of the logits' gradient. Here the output layer's matmul, the float32 logsumexp and the
entropy run over ``chunk`` tokens at a time (peak: a few [chunk, V] tensors).  The
backward recomputes each chunk's logits instead of keeping them (one more matmul of
the output layer per micro-batch: the price of not storing [T, V]).

Numerics: the logits come out of the matmul in the compute dtype, as the model's own
output layer gives them; the softmax statistics (max, sum of exponentials, entropy)
and the weight gradient summed over chunks are float32.

:func:`chunked_output_layer` puts the computation *inside* the model's forward, as the
output layer's: DeepSpeed then treats it as that module's forward (ZeRO-3 gathers the
weight once for all chunks and again for the backward, and releases it after), and
the engine's backward prologue runs before any parameter gradient, as it expects.

Not handled (refused with an error): models whose causal-LM head post-processes the
logits (final-logit softcapping as in Gemma 2/3, a ``logit_scale`` as in Cohere) and
output layers with a bias.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["chunked_logprobs", "chunked_output_layer"]


def _chunk_stats(h: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, entropy: bool) -> tuple:
    """For one chunk: ``(logp_all [C, V] f32, p [C, V] f32, logp [C], entropy [C] or None)``.

    ``logp_all`` and ``p`` are fresh buffers the caller may overwrite.
    """
    z = (h @ weight.T).float()  # [C, V]; a copy when the compute dtype is not f32
    z = z.sub_(z.amax(-1, keepdim=True))  # [C, V], max 0 per row: exp cannot overflow
    p = z.exp()  # [C, V]
    total = p.sum(-1, keepdim=True)  # [C, 1]
    logp_all = z.sub_(total.log())  # [C, V], log-softmax in place
    p = p.div_(total)  # [C, V], softmax in place
    logp = logp_all.gather(-1, y[:, None]).squeeze(-1)  # [C]
    ent = -(p[:, None, :] @ logp_all[:, :, None]).reshape(-1) if entropy else None  # [C]; a row-wise dot
    return logp_all, p, logp, ent


def _chunk_backward(
    h: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
    grad_h: torch.Tensor | None, grad_w: torch.Tensor | None, rows: slice,
) -> None:  # fmt: skip
    """Recompute one chunk and add its gradients: ``grad_h[rows] = dz @ W``,
    ``grad_w += dz.T @ h``, with ``g`` [C, k] the gradient of the chunk's outputs.
    A function so that the chunk's [C, V] buffers are freed on return."""
    logp_all, p, _, ent = _chunk_stats(h, weight, y, g.shape[1] == 2)
    # d logp_y / dz = onehot(y) - p;  d entropy / dz = -p * (logp_all + entropy).
    # So dz = g_logp * onehot(y) - p * (g_logp + g_ent * (logp_all + entropy)), in place.
    if g.shape[1] == 2:
        dz = logp_all.add_(ent[:, None]).mul_(g[:, 1:]).add_(g[:, :1]).mul_(p).neg_()  # [C, V]
    else:
        dz = p.mul_(-g)  # [C, V]
    del logp_all, p  # dz is one of them; the other can go before the matmuls
    dz.scatter_add_(-1, y[:, None], g[:, :1])
    dz = dz.to(weight.dtype)  # [C, V]
    if grad_h is not None:
        grad_h[rows] = dz @ weight  # [C, H]
    if grad_w is not None:
        # [V, H] += [V, C] @ [C, H]; addmm_ when the dtypes agree, else the chunk's
        # product (float32-accumulated in the matmul) is added into the float32 sum.
        if grad_w.dtype == dz.dtype:
            grad_w.addmm_(dz.T, h)
        else:
            grad_w.add_(dz.T @ h)


class _ChunkedLogprobs(torch.autograd.Function):
    """``(hidden [T, H], weight [V, H], targets [T]) -> [T, k]`` float32: column 0 the
    target's log-prob, column 1 (when ``k == 2``) the entropy of the distribution."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, k):
        out = torch.empty(hidden.shape[0], k, dtype=torch.float32, device=hidden.device)  # [T, k]
        for s in range(0, hidden.shape[0], chunk):  # autograd records nothing in here
            # [2:]: the chunk's [C, V] buffers are freed before the next chunk's are made.
            logp, ent = _chunk_stats(hidden[s : s + chunk], weight, targets[s : s + chunk], k == 2)[2:]
            out[s : s + chunk, 0] = logp
            if k == 2:
                out[s : s + chunk, 1] = ent
        ctx.save_for_backward(hidden, weight, targets)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, targets = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[:2]
        grad_h = torch.empty_like(hidden) if need_h else None  # [T, H]
        # Summed over chunks in float32 (one rounding to the weight's dtype at the end).
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None  # [V, H]
        for s in range(0, hidden.shape[0], ctx.chunk):
            rows = slice(s, s + ctx.chunk)
            _chunk_backward(hidden[rows], weight, targets[rows], grad_out[rows], grad_h, grad_w, rows)
        return grad_h, None if grad_w is None else grad_w.to(weight.dtype), None, None, None


def chunked_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, chunk: int, entropy: bool
) -> torch.Tensor:
    """Log-prob of each target under ``softmax(hidden @ weight.T)``, and its entropy.

    Args:
        hidden: ``[T, H]`` last hidden states, in the compute dtype.
        weight: ``[V, H]`` output layer weight (no bias).
        targets: ``[T]`` int64 token ids.
        chunk: tokens per chunk (>= 1).
        entropy: add the entropy column.

    Returns:
        ``[T, 2]`` (log-prob, entropy) or ``[T, 1]`` (log-prob) in float32,
        differentiable in ``hidden`` and ``weight``.
    """
    assert chunk >= 1, f"chunked_logprobs: chunk must be >= 1, got {chunk}"
    return _ChunkedLogprobs.apply(hidden, weight, targets, chunk, 2 if entropy else 1)


@contextmanager
def chunked_output_layer(model: torch.nn.Module, targets: torch.Tensor, *, chunk: int, entropy: bool) -> Iterator[None]:
    """Within the block, ``model``'s output layer returns ``[1, T, k]`` float32 (see
    :func:`chunked_logprobs`) in place of the logits, for a forward over one packed row
    whose next tokens are ``targets`` [T].

    The layer's own module is called (its hooks run: ZeRO-3 gathers and releases its
    weight around the chunks); only its ``forward`` is swapped, for this block.

    Raises:
        NotImplementedError: the model post-processes its logits or the output layer
            has a bias, which the chunks do not reproduce.
    """
    cfg = model.config
    if getattr(cfg, "final_logit_softcapping", None) or getattr(model, "logit_scale", None) is not None:
        raise NotImplementedError(f"chunked log-probs: {cfg.model_type} rescales its logits (softcapping/logit_scale)")
    head = model.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise NotImplementedError(f"chunked log-probs: {cfg.model_type}'s output layer has a bias")

    def forward(hidden: torch.Tensor) -> torch.Tensor:  # [1, T, H] -> [1, T, k]
        assert hidden.shape[:2] == (1, targets.shape[0]), (
            f"one packed row of {targets.shape[0]} tokens, got {tuple(hidden.shape)}"
        )
        return chunked_logprobs(hidden[0], head.weight, targets, chunk=chunk, entropy=entropy)[None]

    head.forward = forward  # an instance attribute: shadows the class's forward
    try:
        yield
    finally:
        del head.forward
