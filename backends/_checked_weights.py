"""Loading a safetensors directory into a live ``transformers`` model, checked first:
every name and shape is compared against the model (file headers only) before any
tensor is copied, so weights of another model are refused whole and never half-loaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._errors import RequestRejected, ServerError

__all__ = ["load_checked_weights"]


def load_checked_weights(model: Any, directory: Path) -> None:
    """Check every name and shape against the model (file headers only), then copy."""
    import torch
    from safetensors import SafetensorError, safe_open

    def reject(problem: str) -> RequestRejected:
        return RequestRejected(f"load_weights_from_disk: {directory}: {problem}", 400)

    index = directory / "model.safetensors.index.json"
    try:
        shards = set(json.loads(index.read_text())["weight_map"].values()) if index.is_file() else {"model.safetensors"}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise reject(f"not a safetensors index: {exc}") from exc
    state = model.state_dict()  # tensors sharing the parameters' storage
    plan: dict[Path, list[str]] = {}
    problems: list[str] = []
    try:
        for file in sorted(directory / shard for shard in shards):
            with safe_open(str(file), framework="pt") as f:
                plan[file] = list(f.keys())
                for name in plan[file]:
                    if name not in state:
                        problems.append(f"{name}: not a weight of this model")
                    elif (shape := tuple(f.get_slice(name).get_shape())) != tuple(state[name].shape):
                        problems.append(f"{name}: shape {shape}, the model's is {tuple(state[name].shape)}")
    except (OSError, SafetensorError) as exc:  # a missing or unreadable file
        raise reject(f"{type(exc).__name__}: {exc}") from exc
    names = {name for keys in plan.values() for name in keys}
    # Required: each parameter once (a tied lm_head is stored under the embedding's
    # name only) and each persistent buffer; any state_dict name is accepted.
    required = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers() if n in state}
    problems += [f"{name}: missing" for name in sorted(required - names)]
    if problems:
        raise reject(f"not this model's weights ({len(problems)} problems): {'; '.join(problems[:5])}")
    try:
        with torch.no_grad():
            for file, keys in plan.items():
                with safe_open(str(file), framework="pt") as f:
                    for name in keys:
                        state[name].copy_(f.get_tensor(name))
    except Exception as exc:  # all was checked: what fails now is the machine (memory, disk)
        raise ServerError(f"load_weights_from_disk: {directory}: the copy failed midway: {exc}") from exc
