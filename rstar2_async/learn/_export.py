"""Weight export for weight sync: full weights gathered from any ZeRO stage.

Three ways out:

- **buckets**: :func:`iter_weight_buckets` streams ``(name, tensor)`` pairs in
  buckets of about ``learner.export_bucket_mb``; under ZeRO-3 each bucket is
  gathered with ``GatheredParameters`` and released before the next, so an export
  never holds more than one bucket beyond the model's shards.
- **disk**: :func:`save_hf_checkpoint` writes sharded safetensors
  (``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json``, or one
  ``model.safetensors``), ``config.json``, ``generation_config.json`` and the tokenizer
  files of the source model. Names are the Hugging Face ones (``lm_head.weight`` is
  written whenever the model has its own, i.e. untied), so the directory loads in
  transformers and in vLLM unchanged.  Each gathered bucket is written as it comes
  (``_export_writer``: at disk speed, published atomically).
- **in memory, written later**: :func:`gather_export` returns rank 0 a
  :class:`PendingExport`, the full weights as CPU tensors plus the config and
  tokenizer files, whose :meth:`PendingExport.write` writes the same directory as
  :func:`save_hf_checkpoint` without touching the learner.  The broadcast transport
  sends those tensors while the directory is written (the export is then off the
  sync's path), at the cost of one CPU copy of the weights on rank 0 until both end.

Every rank must call the gathering functions (they are collective); only rank 0 writes.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, final

import torch

from ._export_writer import TensorSpec, write_safetensors_dir

if TYPE_CHECKING:
    from ._learner import Learner

__all__ = ["TOKENIZER_FILES", "PendingExport", "gather_export", "iter_weight_buckets", "save_hf_checkpoint"]

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja", "chat_template.json",
)  # fmt: skip
"""Files copied verbatim from the source model directory when present."""


def _numel(p: torch.nn.Parameter) -> int:
    # ZeRO-3 parameters are empty placeholders; their full size is ds_numel.
    return int(getattr(p, "ds_numel", p.numel()))


def iter_weight_buckets(
    learner: Learner, *, bucket_mb: int | None = None, dtype: torch.dtype | None = None
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Yield the full weights as lists of ``(hf_name, cpu_tensor)``, about
    ``bucket_mb`` MiB each, in ``named_parameters`` order, on every rank.

    Tensors are detached CPU copies in ``dtype`` (default: the training precision),
    owned by the caller. Collective under ZeRO-3: all ranks must exhaust the
    iterator.
    """
    return _buckets(learner, bucket_mb=bucket_mb, dtype=dtype, copy=True)


def _buckets(
    learner: Learner, *, bucket_mb: int | None, dtype: torch.dtype | None, copy: bool | None
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """:func:`iter_weight_buckets`; with ``copy=False`` a tensor already on the CPU in
    ``dtype`` is the parameter itself (or its ZeRO-3 gathered full view), valid only
    until the next bucket is asked for and while the learner does not step; with
    ``copy=None`` the buckets are empty (the gathers still happen)."""
    module = learner.module
    dtype = dtype or learner.dtype
    limit = (bucket_mb or learner.config.export_bucket_mb) * 2**20
    zero3 = learner.config.zero_stage == 3
    bucket: list[tuple[str, torch.nn.Parameter]] = []
    size = 0
    for name, p in module.named_parameters():
        bucket.append((name, p))
        size += _numel(p) * dtype.itemsize
        if size >= limit:
            yield from _materialise(bucket, zero3, dtype, copy)
            bucket, size = [], 0
    if bucket:
        yield from _materialise(bucket, zero3, dtype, copy)


def _materialise(
    bucket: list[tuple[str, torch.nn.Parameter]], zero3: bool, dtype: torch.dtype, copy: bool | None
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    def tensors() -> list[tuple[str, torch.Tensor]]:
        if copy is None:  # a rank that only takes part in the gathers
            return []
        return [(n, p.detach().to("cpu", dtype, copy=copy)) for n, p in bucket]

    if not zero3:
        yield tensors()
        return
    import deepspeed

    # Gathers the bucket's partitions on every rank; released on exit: before the
    # copies are handed out, or, for views, once the consumer asks for the next bucket.
    with deepspeed.zero.GatheredParameters([p for _, p in bucket], modifier_rank=None):
        out = tensors()
        if not copy:
            yield out
    if copy:
        yield out


def _follow_gathers(learner: Learner, dtype: torch.dtype) -> None:
    """A rank other than 0's part of an export: every gather rank 0 runs, nothing kept."""
    for _ in _buckets(learner, bucket_mb=None, dtype=dtype, copy=None):
        pass


def save_hf_checkpoint(
    learner: Learner,
    out_dir: str | Path,
    *,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int | None = None,
) -> Path | None:
    """Write the current weights as a Hugging Face model directory.

    The directory appears atomically: it is written beside ``out_dir`` and renamed
    into place (replacing an older export), so a reader (an inference server
    reloading weights) never sees a partial one, even after a crash. Collective;
    rank 0 writes and returns the path, other ranks return None.

    Raises:
        OSError: the directory cannot be written (rank 0; raised once every rank
            has finished the collective part, so none is left waiting).
    """
    dtype = dtype or learner.dtype
    if learner.rank != 0:
        return _follow_gathers(learner, dtype)
    buckets = _buckets(learner, bucket_mb=None, dtype=dtype, copy=False)
    specs = [
        TensorSpec(name, dtype, tuple(getattr(p, "ds_shape", p.shape)))
        for name, p in learner.module.named_parameters()
    ]  # fmt: skip
    return write_safetensors_dir(
        out_dir, specs, buckets,
        max_shard_bytes=max_shard_bytes or learner.config.export_shard_mb * 2**20,
        extra_files=lambda tmp: _write_files(tmp, _side_files(learner, dtype)),
    )  # fmt: skip


def gather_export(learner: Learner, *, dtype: torch.dtype | None = None) -> PendingExport | None:
    """The current weights, gathered into CPU memory on rank 0, with the files that
    go beside them; :meth:`PendingExport.write` later writes what
    :func:`save_hf_checkpoint` would have.  Collective; other ranks return None.

    Rank 0 holds a copy of the whole model in ``dtype`` (default: the training
    precision) until the returned export is dropped.
    """
    dtype = dtype or learner.dtype
    if learner.rank != 0:
        return _follow_gathers(learner, dtype)
    tensors = {name: t for bucket in _buckets(learner, bucket_mb=None, dtype=dtype, copy=True) for name, t in bucket}
    return PendingExport(tensors, _side_files(learner, dtype), learner.config.export_shard_mb * 2**20)


@final
class PendingExport:
    """Full weights in memory (name -> CPU tensor, in ``named_parameters`` order) and
    the config and tokenizer files, not yet on disk.  Holds no reference to the
    learner: :meth:`write` may run in any thread while the learner trains."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], files: Mapping[str, bytes], max_shard_bytes: int) -> None:
        self.tensors = dict(tensors)
        self.files = dict(files)
        self.max_shard_bytes = max_shard_bytes

    def write(self, out_dir: str | Path) -> Path:
        """Publish the weights at ``out_dir`` atomically, as :func:`save_hf_checkpoint`
        does.

        Raises:
            OSError: the directory cannot be written; nothing is published.
        """
        specs = [TensorSpec(name, t.dtype, tuple(t.shape)) for name, t in self.tensors.items()]
        return write_safetensors_dir(
            out_dir, specs, [list(self.tensors.items())], max_shard_bytes=self.max_shard_bytes,
            extra_files=lambda tmp: _write_files(tmp, self.files),
        )  # fmt: skip


def _side_files(learner: Learner, dtype: torch.dtype) -> dict[str, bytes]:
    """config.json (for inference: cache on, the export's dtype), generation_config.json
    and the tokenizer files of the source model, by file name."""
    config = learner.module.config
    with tempfile.TemporaryDirectory() as tmp:
        config.use_cache = True  # the learner turns it off for training
        try:
            config.save_pretrained(tmp)
        finally:
            config.use_cache = False
        cfg = json.loads((Path(tmp) / "config.json").read_text())
    cfg["dtype"] = cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    files = {"config.json": json.dumps(cfg, indent=2, sort_keys=True).encode()}
    for name in ("generation_config.json", *TOKENIZER_FILES):
        if (learner.model_path / name).is_file():
            files[name] = (learner.model_path / name).read_bytes()
    return files


def _write_files(directory: Path, files: Mapping[str, bytes]) -> None:
    for name, data in files.items():
        (directory / name).write_bytes(data)
