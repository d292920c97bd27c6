"""The write half of an export: safetensors shards written at disk speed and published
atomically (see :func:`write_safetensors_dir`).

How it runs at disk speed (``benchmarks/weight_sync.py`` times it): the shard layout is
planned from the tensors' names, shapes and dtype before any byte is written, so each
shard's header is written first and every tensor's bytes go straight from the tensor
into the file, in one pass, with no intermediate copy, no second pass to learn the
shards' keys and no rename of shards.  The kernel is asked to start writing each tensor
to disk as soon as it is in the page cache (``sync_file_range``), so the fsyncs that make
the export durable before it is published overlap with the writing instead of following
it.  Plain file I/O: nothing here is collective, so it may run while the learner trains.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

__all__ = ["Bucket", "TensorSpec", "fsync_path", "write_safetensors_dir"]

_SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
}  # fmt: skip
"""The safetensors name of each dtype an export may be written in."""

Bucket = Sequence[tuple[str, torch.Tensor]]


class TensorSpec(NamedTuple):
    """What the writer will be given for one tensor, known before its bytes are."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * math.prod(self.shape)


def write_safetensors_dir(
    out_dir: str | Path,
    specs: Sequence[TensorSpec],
    buckets: Iterable[Bucket],
    *,
    max_shard_bytes: int,
    extra_files: Callable[[Path], None] | None = None,
) -> Path:
    """The write half of :func:`save_hf_checkpoint`: write the tensors of ``buckets``
    (in ``specs`` order, each matching its spec) as safetensors shards of at most
    ``max_shard_bytes`` (a larger tensor gets a shard of its own), plus the index when
    there are several, plus what ``extra_files(tmp)`` writes, and publish the
    directory at ``out_dir`` atomically (replacing an older one).

    ``buckets`` is always exhausted, even when writing fails (it may be a collective
    gather that other ranks are taking part in); each bucket's tensors are written
    before the next bucket is asked for, so they may be views that the next step of
    the iterator invalidates.

    Raises:
        ValueError: a tensor does not match its spec, or the buckets hold more or
            fewer tensors than ``specs``.
        OSError: the directory cannot be written; nothing is published.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    writer: _ShardWriter | None = None
    try:
        writer = _ShardWriter(tmp, specs, max_shard_bytes)
        error: BaseException | None = None
        for bucket in buckets:
            if error is None:
                try:
                    for name, tensor in bucket:
                        writer.write(name, tensor)
                except (OSError, ValueError) as exc:
                    error = exc  # keep draining: the other ranks are still gathering
        if error is not None:
            raise error
        weight_map = writer.close()
        if len(writer.files) > 1:
            index = {"metadata": {"total_size": sum(s.nbytes for s in specs)}, "weight_map": weight_map}
            (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True))
        if extra_files is not None:
            extra_files(tmp)
        # The rename below publishes the directory.  On ext4 (delayed allocation) and
        # most filesystems a crash may persist the rename before the files' data, so
        # without these fsyncs a reader after a crash (the resumed run, a restarted
        # server) could find a complete-looking export with empty or short files.
        # The shards were fsynced as they were finished (_ShardWriter); the small
        # files are fsynced here, then the directory itself (its entries).
        for path in tmp.iterdir():
            if path.name not in writer.files:
                fsync_path(path)
        fsync_path(tmp)
    except BaseException:
        if writer is not None:
            writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace_dir(tmp, out_dir)
    return out_dir


class _ShardWriter:
    """Writes tensors in spec order into planned shards, each opened with its header.

    The plan is the old rule: a new shard starts when the next tensor would take the
    current one past the limit.  Files get their final names at once (the count is
    known from the plan)."""

    def __init__(self, directory: Path, specs: Sequence[TensorSpec], max_shard_bytes: int) -> None:
        assert sys.byteorder == "little", "safetensors stores little-endian bytes: this writer copies memory as is"
        shards: list[list[TensorSpec]] = [[]]
        size = 0
        for spec in specs:
            if spec.dtype not in _SAFETENSORS_DTYPES:
                raise ValueError(f"{spec.name}: no safetensors dtype for {spec.dtype}")
            if size and size + spec.nbytes > max_shard_bytes:
                shards.append([])
                size = 0
            shards[-1].append(spec)
            size += spec.nbytes
        n = len(shards)
        self.files = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)] if n > 1 else ["model.safetensors"]
        self._plan = [(i, spec) for i, shard in enumerate(shards) for spec in shard]
        self._shards = shards
        self._directory = directory
        self._next = 0  # index into _plan
        self._fd: int | None = None
        self._open_shard = -1
        self._offset = 0

    def write(self, name: str, tensor: torch.Tensor) -> None:
        if self._next == len(self._plan):
            raise ValueError(f"{name}: more tensors than specs ({len(self._plan)})")
        shard, spec = self._plan[self._next]
        if (name, tensor.dtype, tuple(tensor.shape)) != spec:
            raise ValueError(f"tensor {self._next} is {name} {tensor.dtype} {tuple(tensor.shape)}, expected {spec}")
        if shard != self._open_shard:
            self._finish_file()
            self._open(shard)
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()
        _write_all(self._fd, memoryview(data))  # type: ignore[arg-type]
        _start_writeback(self._fd, self._offset, data.nbytes)  # type: ignore[arg-type]
        self._offset += data.nbytes
        self._next += 1

    def close(self) -> dict[str, str]:
        """Finish the last file; returns the weight map (tensor name -> file name)."""
        if self._next != len(self._plan):
            raise ValueError(f"{len(self._plan) - self._next} tensors missing, from {self._plan[self._next][1].name}")
        if not self._plan:  # no tensors at all: still a valid (empty) model.safetensors
            self._open(0)
        self._finish_file()
        return {spec.name: self.files[i] for i, spec in self._plan}

    def _open(self, shard: int) -> None:
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        begin = 0
        for spec in self._shards[shard]:
            end, dtype = begin + spec.nbytes, _SAFETENSORS_DTYPES[spec.dtype]
            header[spec.name] = {"dtype": dtype, "shape": list(spec.shape), "data_offsets": [begin, end]}
            begin = end
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # safetensors pads the header so the data is 8-byte aligned
        path = self._directory / self.files[shard]
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._open_shard = shard
        _write_all(self._fd, memoryview(struct.pack("<Q", len(raw)) + raw))
        self._offset = 8 + len(raw)

    def _finish_file(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            # Durable before the directory is published (see write_safetensors_dir);
            # most of it is on disk already (_start_writeback), so this waits little.
            os.fsync(fd)
        finally:
            os.close(fd)

    def abort(self) -> None:
        """Close the open file, if any, without syncing it (a failed export)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2
"""Linux's flag: start writeback of the range's dirty pages, without waiting for it."""


def _start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing these bytes to disk now (best effort; the
    pages stay cached, so a server reloading the export still reads memory).  The
    kernel would otherwise wait for its dirty-page thresholds and the final fsync
    would write the whole shard after the fact."""
    if _SYNC_FILE_RANGE is not None and nbytes:
        _SYNC_FILE_RANGE(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_dir(tmp: Path, out_dir: Path) -> None:
    """Move the complete, fsynced ``tmp`` to ``out_dir``, replacing an existing
    directory. Each rename is atomic; between them ``out_dir`` is briefly absent,
    never partial."""
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        out_dir.rename(old)
        tmp.rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)  # a crash before this leaves a hidden leftover, never a partial export
    else:
        tmp.rename(out_dir)
    # The rename itself durable: a checkpoint written after this names the directory
    # (the trainer's weights_dir, what --resume serves), so it must not outlive it
    # in a crash.  One fsync of the parent; cheap next to the shards'.
    fsync_path(out_dir.parent)
