"""Weight export for weight sync: full weights gathered from any ZeRO stage.

Two transports read from here:

- **broadcast**: :func:`iter_weight_buckets` streams ``(name, tensor)`` pairs in
  buckets of about ``learner.export_bucket_mb``; under ZeRO-3 each bucket is
  gathered with ``GatheredParameters`` and released before the next, so an export
  never holds more than one bucket beyond the model's shards.
- **disk**: :func:`save_hf_checkpoint` writes sharded safetensors
  (``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json``, or one
  ``model.safetensors``), ``config.json``, ``generation_config.json`` and the tokenizer
  files of the source model. Names are the Hugging Face ones (``lm_head.weight`` is
  written whenever the model has its own, i.e. untied), so the directory loads in
  transformers and in vLLM unchanged.

Every rank must call these functions (gathering is collective); only rank 0 writes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ._learner import Learner

__all__ = ["TOKENIZER_FILES", "iter_weight_buckets", "save_hf_checkpoint"]

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
            yield _materialise(bucket, zero3, dtype)
            bucket, size = [], 0
    if bucket:
        yield _materialise(bucket, zero3, dtype)


def _materialise(
    bucket: list[tuple[str, torch.nn.Parameter]], zero3: bool, dtype: torch.dtype
) -> list[tuple[str, torch.Tensor]]:
    if not zero3:
        return [(n, p.detach().to("cpu", dtype, copy=True)) for n, p in bucket]
    import deepspeed

    # Gathers the bucket's partitions on every rank; released on exit.
    with deepspeed.zero.GatheredParameters([p for _, p in bucket], modifier_rank=None):
        return [(n, p.detach().to("cpu", dtype, copy=True)) for n, p in bucket]


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
    reloading weights) never sees a partial one. Collective; rank 0 writes and
    returns the path, other ranks return None.

    Raises:
        OSError: the directory cannot be written (rank 0).
    """
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    dtype = dtype or learner.dtype
    shard_limit = max_shard_bytes or learner.config.export_shard_mb * 2**20
    writer = learner.rank == 0
    tmp = None
    if writer:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))

    shards: list[dict[str, torch.Tensor]] = [{}]
    shard_size = total = 0
    files: list[Path] = []

    def flush() -> None:
        nonlocal shard_size
        if writer and shards[-1]:
            path = tmp / f"shard-{len(files):05d}.safetensors"  # type: ignore[operator]
            save_file(shards[-1], str(path), metadata={"format": "pt"})
            files.append(path)
        shards[-1] = {}
        shard_size = 0

    for bucket in iter_weight_buckets(learner, dtype=dtype):
        for name, t in bucket:
            if shard_size and shard_size + t.nbytes > shard_limit:
                flush()
            if writer:
                shards[-1][name] = t
            shard_size += t.nbytes
            total += t.nbytes
    flush()
    if not writer:
        return None
    assert tmp is not None
    weight_map = _name_shards(files, tmp)
    if len(files) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True))
    _write_config(learner, tmp, dtype)
    for name in TOKENIZER_FILES:
        if (learner.model_path / name).is_file():
            shutil.copy2(learner.model_path / name, tmp / name)
    _replace_dir(tmp, out_dir)
    return out_dir


def _name_shards(files: list[Path], tmp: Path) -> dict[str, str]:
    """Rename shard files to the Hugging Face pattern; returns the weight map."""
    from safetensors import safe_open

    weight_map: dict[str, str] = {}
    for i, path in enumerate(files):
        final = "model.safetensors" if len(files) == 1 else f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        path.rename(tmp / final)
        with safe_open(str(tmp / final), "pt") as f:
            weight_map |= dict.fromkeys(f.keys(), final)
    return weight_map


def _write_config(learner: Learner, tmp: Path, dtype: torch.dtype) -> None:
    config = learner.module.config
    config.use_cache = True  # the learner turns it off for training
    config.save_pretrained(tmp)
    cfg = json.loads((tmp / "config.json").read_text())
    cfg["dtype"] = cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    config.use_cache = False
    gen = learner.model_path / "generation_config.json"
    if gen.is_file():
        shutil.copy2(gen, tmp / "generation_config.json")


def _replace_dir(tmp: Path, out_dir: Path) -> None:
    """Move ``tmp`` to ``out_dir``, replacing an existing directory. Each rename is
    atomic; between them ``out_dir`` is briefly absent, never partial."""
    for path in tmp.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        out_dir.rename(old)
        tmp.rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out_dir)
