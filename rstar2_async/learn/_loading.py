"""Building the policy and the KL reference from a Hugging Face model directory.

ZeRO 0-2 replicate parameters, so every rank loads the whole model with
``from_pretrained``.  ZeRO-3 partitions them, and so does loading: the model is
built under ``deepspeed.zero.Init`` (each module's parameters are partitioned as
soon as the module exists, with no weight initialisation since the checkpoint
overwrites it) and each rank then reads *its own slice* of every tensor straight
from the safetensors files (plain reads, no mmap: touched mmap pages would count
against the rank as much as a copy).  No rank ever holds a whole tensor, let alone
the whole model, and there are no collectives while loading.

The slice layout is DeepSpeed's own (``partition_parameters._partition_param``): a
parameter is flattened, padded to a multiple of the world size, and rank ``r``
holds elements ``[r * p, (r + 1) * p)`` of it in ``param.ds_tensor``, ``p`` being
``ds_tensor.ds_numel``.  The tests gather the loaded model and compare it with the
checkpoint, which is what catches a change of that layout.

The reference model (``kl_coef > 0``) under ZeRO-3 is a DeepSpeed engine with no
optimizer (as in verl and OpenRLHF): partitioned like the policy, gathered layer by
layer in its forward.  Under ZeRO 0-2 it stays a frozen replicated copy.

Tied output layers (``tie_word_embeddings``) share the embedding's parameter under
every stage, as ``from_pretrained`` makes them.

Not covered: ``.bin`` checkpoints under ZeRO-3 (convert them to safetensors) and
checkpoints whose tensor names differ from the model's parameter names (the
architectures transformers renames while loading).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import deepspeed
import torch
import torch.distributed as dist

__all__ = ["build_reference", "load_policy", "read_safetensors_slice", "safetensors_index"]

_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}  # fmt: skip


def safetensors_index(model_path: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file that holds it (single file or sharded index).

    Raises:
        FileNotFoundError: the directory has no safetensors weights.
    """
    index = model_path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: model_path / file for name, file in weight_map.items()}
    single = model_path / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(
            f"{model_path}: no model.safetensors(.index.json); learner.zero_stage = 3 loads only safetensors"
        )
    return dict.fromkeys(_header(single)[0], single)


def _header(path: Path) -> tuple[dict[str, Any], int]:
    """The tensor entries of a safetensors file and the offset of its data."""
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def read_safetensors_slice(path: Path, name: str, start: int, count: int, *, header=None) -> torch.Tensor:
    """Elements ``[start, start + count)`` of tensor ``name`` flattened (row-major),
    read with one ``readinto`` (only those bytes are ever in memory)."""
    entries, data_start = header or _header(path)
    entry = entries[name]
    dtype = _DTYPES[entry["dtype"]]
    numel = math.prod(entry["shape"])
    assert 0 <= start and start + count <= numel, f"{name}: slice [{start}, {start + count}) of {numel} elements"
    out = torch.empty(count, dtype=dtype)
    if count:
        item = out.element_size()
        with path.open("rb") as f:
            f.seek(data_start + entry["data_offsets"][0] + start * item)
            f.readinto(memoryview(out.view(torch.uint8).numpy()))
    return out


def _no_init_weights():
    try:
        from transformers.initialization import no_init_weights  # transformers 5
    except ImportError:  # 4.x
        from transformers.modeling_utils import no_init_weights
    return no_init_weights()


def _load_partitioned(model_path: Path, ds_config: dict[str, Any], attn_implementation: str) -> torch.nn.Module:
    """Build the model under ``zero.Init`` and fill each rank's partitions from disk."""
    import transformers

    files = safetensors_index(model_path)
    headers = {f: _header(f) for f in set(files.values())}
    hf_config = transformers.AutoConfig.from_pretrained(model_path)
    hf_config._attn_implementation = attn_implementation
    # Import the model's modules before zero.Init patches tensor construction: torch
    # ._dynamo, which transformers imports on the way, fails to import under it.
    model_cls = getattr(transformers, (hf_config.architectures or ["AutoModelForCausalLM"])[0])
    init = model_cls.from_config if model_cls is transformers.AutoModelForCausalLM else model_cls
    with _no_init_weights(), deepspeed.zero.Init(config_dict_or_path=ds_config):
        model = init(hf_config)
        # Skipping the initialisation skips the tie too: share a tied output layer's
        # parameter now (the checkpoint holds it under the embedding's name only).
        model.tie_weights()
    missing = [n for n, _ in model.named_parameters() if n not in files]
    if missing:
        raise KeyError(f"{model_path}: the checkpoint lacks {missing[:5]} ({len(missing)} tensors)")
    with torch.no_grad():
        for name, p in model.named_parameters():
            part = p.ds_tensor
            size = part.ds_numel
            start = size * dist.get_rank(group=p.ds_process_group)
            count = max(0, min(size, p.ds_numel - start))  # the last rank's slice is padded
            src = read_safetensors_slice(files[name], name, start, count, header=headers[files[name]])
            part.data[:count].copy_(src)
    return model


def load_policy(model_path: Path, ds_config: dict[str, Any], attn_implementation: str) -> torch.nn.Module:
    """The policy to hand to ``deepspeed.initialize``: partitioned under ZeRO-3,
    whole (fp32 master weights) otherwise."""
    from transformers import AutoModelForCausalLM

    if ds_config["zero_optimization"]["stage"] == 3:
        model = _load_partitioned(model_path, ds_config, attn_implementation)
    else:
        # Master weights load in fp32; DeepSpeed casts the module to bf16 when enabled.
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation=attn_implementation)
    model.config.use_cache = False
    return model


def build_reference(
    model_path: Path, ds_config: dict[str, Any], dtype: torch.dtype, device: torch.device, attn_implementation: str
):
    """The frozen reference policy: under ZeRO-3 an optimizer-less DeepSpeed engine
    over a partitioned copy, else a replicated module in ``dtype`` on ``device``.
    Either is called like the model and returns ``.logits``."""
    from transformers import AutoModelForCausalLM

    if ds_config["zero_optimization"]["stage"] != 3:
        ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation=attn_implementation)
        return ref.to(device).eval().requires_grad_(False)
    # No optimizer, so no gradient clipping or batch-size bookkeeping to configure.
    ref_config = {k: v for k, v in ds_config.items() if k not in ("gradient_clipping", "zero_allow_untested_optimizer")}
    ref = _load_partitioned(model_path, ref_config, attn_implementation).requires_grad_(False)
    ref.config.use_cache = False
    engine, *_ = deepspeed.initialize(model=ref, config=ref_config)
    engine.eval()  # DeepSpeedEngine.eval returns None
    return engine
