"""Runs inside vLLM's worker processes (``--worker-extension-cls
rstar2_vllm_ext.ReloadExtension``, this directory on ``PYTHONPATH``): an in-place
weight reload that re-ties shared layers and says what it loaded.

Why not vLLM's own ``reload_weights`` (``collective_rpc``): its layer-by-layer
reload (``model_loader/reload/layerwise.py``, called by the CPU and the GPU model
runners alike) processes each layer once every weight of that layer has arrived,
and puts a layer's old kernel tensors back when the checkpoint gave it nothing,
logging ``<Layer>: Failed to load weights``.  A tied ``ParallelLMHead`` never gets
anything: its weight is the embedding's ``Parameter`` and arrives as
``embed_tokens``.  The shared ``Parameter`` itself is refreshed in place, which is
all a GPU build's head reads (``F.linear(x, layer.weight)``); vLLM CPU, though,
re-packs the head at load (``UnquantizedEmbeddingMethod.process_weights_after_loading``
-> ``dispatch_cpu_unquantized_gemm``: a packed copy or a oneDNN handle) and reads
only that copy, so after a reload a tied head keeps computing with the *old*
weights, silently.  Re-running the head's own ``process_weights_after_loading``
after the load re-packs it from the refreshed ``Parameter`` (a no-op on GPUs), so
the same code is right on both.

The reload is vLLM's own sequence (``reload/inplace.py``: point the model config at
the directory, stream its tensors through ``initialize_layerwise_reload``,
``model.load_weights``, ``finalize_layerwise_reload``), kept here so that the set of
parameters ``model.load_weights`` reports loaded (vLLM's own word, which
``reload_weights`` logs and drops) comes back to the caller with the names the
checkpoint held.

This file imports only the standard library, torch and vLLM: it is loaded by vLLM's
interpreter, never by ours.
"""

from __future__ import annotations

from typing import Any


class ReloadExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (``model_runner``,
    ``vllm_config``)."""

    def rstar2_reload_weights(self, weights_path: str) -> dict[str, Any]:
        """Reload every weight in place from the safetensors directory
        ``weights_path``, then re-process the layers that share a tied parameter.

        Returns a report (JSON-able): ``read``, how many tensors the checkpoint
        held; ``unloaded``, the model's parameters no tensor was loaded into;
        ``unconsumed``, the checkpoint's tensors that reached no loaded parameter
        (both by name; empty when the reload is complete); ``retied``, the layers
        re-processed because the parameter they hold was loaded under another
        layer's name (a tied head).

        Raises:
            RuntimeError: the model's ``load_weights`` names nothing it loaded.
        """
        import torch
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader import get_model_loader
        from vllm.model_executor.model_loader.reload.layerwise import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        runner = self.model_runner  # type: ignore[attr-defined]
        config = self.vllm_config  # type: ignore[attr-defined]
        model = runner.get_model()
        model_config = config.model_config
        read: list[str] = []

        def weights() -> Any:
            for name, tensor in get_model_loader(config.load_config).get_all_weights(model_config, model):
                read.append(name)
                yield name, tensor

        with set_current_vllm_config(config):
            # As reload_weights does: the weights now come from this directory.
            model_config.model = weights_path
            model_config.model_weights = ""
            model_config.revision = None
            initialize_layerwise_reload(model)
            loaded = model.load_weights(weights())
            finalize_layerwise_reload(model, model_config)
            if loaded is None:  # a model whose load_weights names nothing: vLLM's word cannot be read
                raise RuntimeError(f"{type(model).__name__}.load_weights reports no names: the reload cannot be confirmed")
            loaded = set(loaded)
            with torch.no_grad():
                retied = _retie(model, loaded)
        runner.reset_lora_state()
        runner.reset_encoder_cache()
        runner.reset_mm_cache()
        # A parameter is loaded under any of its names (a tied one has two).
        names: dict[int, list[str]] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(param), []).append(name)
        unloaded = sorted(aliases[0] for aliases in names.values() if loaded.isdisjoint(aliases))
        mapper = getattr(model, "hf_to_vllm_mapper", None)
        unconsumed = [name for name in read if _target(name, mapper) not in loaded]
        return {"read": len(read), "unloaded": unloaded, "unconsumed": unconsumed, "retied": retied}


def _target(name: str, mapper: Any) -> str | None:
    """The parameter a checkpoint tensor loads into (``q_proj`` -> ``qkv_proj``...),
    by the model's own name mapper."""
    return name if mapper is None else mapper.map_name(name)


def _retie(model: Any, loaded: set[str]) -> list[str]:
    """Re-process each layer that holds a parameter under a name nothing loaded into
    while another layer shares it (a tied head: the checkpoint fed the embedding):
    the layer-wise reload skipped that layer, so its processed copy (vLLM CPU's
    packed weights) still holds the old values."""
    owners: dict[int, int] = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None:
                owners[id(param)] = owners.get(id(param), 0) + 1
    retied = []
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        skipped = any(
            p is not None and owners[id(p)] > 1 and f"{name}.{local}".lstrip(".") not in loaded
            for local, p in module._parameters.items()
        )
        if skipped and method is not None:
            method.process_weights_after_loading(module)
            retied.append(name)
    return retied
