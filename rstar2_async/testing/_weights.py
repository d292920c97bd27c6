"""New weights for tests and benchmarks of the weight sync, made the way a learner's
export is: a model directory's weights moved by noise, saved as a Hugging Face directory."""

from __future__ import annotations

from pathlib import Path

__all__ = ["perturbed_weights"]


def perturbed_weights(model_dir: Path, out_dir: Path, seed: int = 1) -> Path:
    """New weights, as a learner would export them: ``model_dir``'s model with
    Gaussian noise (std 0.05) on every parameter, saved to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    model.save_pretrained(out_dir)
    return out_dir
