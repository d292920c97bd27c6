"""The learner at a real model's size on one GPU: one prepared run for a lent machine.

    make gpu-check            # on the GPU machine (installs DeepSpeed from vendor/ first)
    make gpu-check DRY=1      # here, on CPU: every size shrunk, same code path
    python benchmarks/gpu_check.py [--dry] [--timeout-s 480]

On a config-only Qwen3-1.7B-shaped model (hidden 2048, 28 layers, 16 query / 8 KV
heads of 128, MLP 6144, the real vocabulary of 151,936; untied output layer, as the
learner keeps it; random weights written once as safetensors), each phase in a
process of its own so that peak memory is its own:

1. ``zero2``, ``zero3``: the learner (one rank, bf16, gradient checkpointing) on packed
   32K-token micro-batches (sequences of 1-8K tokens): tokens/s, MFU against the
   device's dense bf16 peak, peak memory, and the memory plan's estimate beside it.
2. ``torch``: the baseline, a plain PyTorch step on the same model and micro-batches
   (float32 weights, bf16 autocast, gradient checkpointing, AdamW, clipping).
3. ``logprobs``: one forward+backward of the output layer and log-probs over the
   32K tokens: the naive [T, V] path against the chunked one
   (``rstar2_async.learn.chunked_logprobs``, where the package has it; otherwise the
   key is null with the reason).
4. ``export``: :func:`rstar2_async.learn.save_hf_checkpoint` from the ZeRO-3 learner:
   seconds and GB/s.

MFU counts the model's FLOPs (6 x parameters x tokens, plus causal attention), not
the recomputation that checkpointing adds.  Progress goes to stderr; the last stdout
line is the JSON summary.  ``--dry`` shrinks the model (hidden 64, 2 layers,
vocabulary 512) and the micro-batch (512 tokens) and runs on CPU.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN3_1_7B = {
    "hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936, "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}  # fmt: skip
DRY = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "intermediate_size": 128, "vocab_size": 512, "max_position_embeddings": 2048, "tie_word_embeddings": False,
}  # fmt: skip
TOKENS, DRY_TOKENS = 32768, 512
STEPS = 3
"""Timed steps per phase, after one warm-up step (compilation, allocator growth)."""
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
"""Dense bf16 tensor-core peaks (NVIDIA data sheets); MFU is null on other devices."""
PHASES = ("zero2", "zero3", "torch", "logprobs")


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def make_model(out: Path, dry: bool) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**(DRY if dry else QWEN3_1_7B), eos_token_id=1, pad_token_id=0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)  # safetensors, one file per 5 GB
    return out


def packed_batch(tokens: int, vocab: int, dry: bool):
    """One packed micro-batch of ``tokens`` tokens: sequences of 1-8K tokens (64-256 dry)."""
    import random

    from rstar2_async.learn import TrainSeq, collate

    rng = random.Random(0)
    lo, hi = (64, 256) if dry else (1024, 8192)
    lengths, left = [], tokens
    while left > 0:
        lengths.append(min(left, rng.randint(lo, hi)))
        left -= lengths[-1]
    seqs = [
        TrainSeq(ids=[rng.randrange(2, vocab) for _ in range(n)], mask=[1] * n, logprobs=[-1.0] * n, advantage=1.0)
        for n in lengths
    ]
    return collate(seqs), lengths


def model_flops(cfg: dict, params: int, lengths: list[int]) -> float:
    """6 N T for the matmuls plus causal attention (QK^T and AV, forward and backward)."""
    attn = 6 * cfg["num_hidden_layers"] * cfg["num_attention_heads"] * cfg["head_dim"] * sum(n * n for n in lengths)
    return 6 * params * sum(lengths) + attn


def peak_reset() -> int:
    """Reset the peak-memory counter; returns the baseline it is measured from."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return 0
    # glibc keeps freed blocks resident: a phase that fits in them would read as a peak
    # of 0 bytes (CI measured the chunked log-probs so).  Hand them back to the OS first.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    return _rss_kb("VmRSS") * 1024


def peak_bytes(base: int) -> int:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated()
    return _rss_kb("VmHWM") * 1024 - base


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()  # a timing boundary


def device_info() -> tuple[str, float | None]:
    import torch

    if not torch.cuda.is_available():
        return "cpu", None
    name = torch.cuda.get_device_name(0)
    return name, next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def timed_steps(step, tokens: int, flops: float, peak_flops: float | None) -> dict:
    step()  # warm-up
    times = []
    for _ in range(STEPS):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    s = sorted(times)[len(times) // 2]
    return {"step_s": s, "tokens_per_s": tokens / s, "mfu": flops / s / peak_flops if peak_flops else None}


def phase_learner(model: Path, stage: int, dry: bool, export_dir: Path | None) -> dict:
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, save_hf_checkpoint

    tokens = DRY_TOKENS if dry else TOKENS
    cfg = LearnerConfig(zero_stage=stage, precision="bf16", gradient_checkpointing=True, micro_batch_tokens=tokens,
                        lr=1e-6, warmup_steps=0)  # fmt: skip
    base = peak_reset()
    learner = Learner(cfg, model)
    shape = json.loads((model / "config.json").read_text())
    mb, lengths = packed_batch(tokens, shape["vocab_size"], dry)

    def step() -> None:
        logp, _ = learner.logprobs(mb)
        learner.backward(-(logp * mb.mask.to(logp.device)).sum() / len(lengths), last=True)
        learner.step()

    params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in learner.module.parameters())
    out = timed_steps(step, tokens, model_flops(shape, params, lengths), device_info()[1])
    out |= {"peak_gb": peak_bytes(base) / 1e9, "plan_gb": learner.memory_plan.total / 1e9, "params": params}
    if export_dir is not None:
        sync()
        t0 = time.perf_counter()
        save_hf_checkpoint(learner, export_dir)
        s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in export_dir.glob("*.safetensors"))
        out["export"] = {"s": s, "gb": size / 1e9, "gb_per_s": size / 1e9 / s}
    return out


def phase_torch(model: Path, dry: bool) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    tokens = DRY_TOKENS if dry else TOKENS
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base = peak_reset()
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).to(dev)
    net.config.use_cache = False
    net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(net.parameters(), lr=1e-6, weight_decay=0.01)
    shape = json.loads((model / "config.json").read_text())
    mb, lengths = packed_batch(tokens, shape["vocab_size"], dry)
    mb = mb.to(dev)

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = net(input_ids=mb.input_ids, position_ids=mb.position_ids).logits[0].float()  # [T, V]
        logp = logits.gather(-1, mb.targets[:, None]).squeeze(-1) - torch.logsumexp(logits, -1)  # [T]
        (-(logp * mb.mask).sum() / len(lengths)).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    params = sum(p.numel() for p in net.parameters())
    out = timed_steps(step, tokens, model_flops(shape, params, lengths), device_info()[1])
    return out | {"peak_gb": peak_bytes(base) / 1e9}


def phase_logprobs(model: Path, dry: bool) -> dict:
    """Naive [T, V] log-probs against the chunked ones, forward + backward."""
    import torch

    shape = json.loads((model / "config.json").read_text())
    tokens, vocab, hidden = (DRY_TOKENS if dry else TOKENS), shape["vocab_size"], shape["hidden_size"]
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator(device=dev).manual_seed(0)
    h = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16, generator=g) * 0.5
    w = torch.randn(vocab, hidden, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
    y = torch.randint(0, vocab, (tokens,), device=dev, generator=g)

    def naive() -> torch.Tensor:
        logits = (h @ w.T).float()  # [T, V]
        return logits.gather(-1, y[:, None]).squeeze(-1) - torch.logsumexp(logits, -1)

    from rstar2_async import learn
    from rstar2_async.config import LearnerConfig

    fns = {"naive": naive}
    reason = None
    chunked_logprobs = getattr(learn, "chunked_logprobs", None)  # the chunked log-probs' branch exports it
    if chunked_logprobs is not None:
        chunk = LearnerConfig().logprob_chunk_tokens
        fns["chunked"] = lambda: chunked_logprobs(h, w, y, chunk=chunk, entropy=False)[:, 0]
    else:
        reason = "rstar2_async.learn has no chunked_logprobs on this branch: the learner computes log-probs naively"
    out: dict = {}
    for name, fn in fns.items():
        h.requires_grad_(True)
        w.requires_grad_(True)

        def step(fn=fn) -> None:
            fn().sum().backward()
            h.grad = w.grad = None

        gc.collect()
        base = peak_reset()
        res = timed_steps(step, tokens, 6.0 * tokens * vocab * hidden, device_info()[1])
        out[name] = res | {"peak_gb": peak_bytes(base) / 1e9}
    out["chunked"] = out.get("chunked")
    out["chunked_reason"] = reason
    return out


def run_phase(name: str, model: Path, dry: bool, work: Path, timeout: float) -> dict:
    """One phase in a fresh process: its peak memory is its own."""
    cmd = [sys.executable, __file__, "--phase", name, "--model", str(model), "--work", str(work)] + ["--dry"] * dry
    log(f"phase {name}")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    log(f"phase {name}: {time.monotonic() - t0:.0f} s")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry", action="store_true", help="shrink every size and run on CPU")
    ap.add_argument("--timeout-s", type=float, default=480, help="wall-clock budget of the whole check")
    ap.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    ap.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dry:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU even where a GPU is
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.phase:  # a child: one phase, one JSON line
        if args.phase in ("zero2", "zero3"):
            stage = int(args.phase[-1])
            result = phase_learner(args.model, stage, args.dry, args.work / "export" if stage == 3 else None)
        elif args.phase == "torch":
            result = phase_torch(args.model, args.dry)
        else:
            result = phase_logprobs(args.model, args.dry)
        print(json.dumps(result))
        return 0

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        log("writing the model")
        model = make_model(work / "model", args.dry)
        name, peak = device_info()
        result: dict = {"device": name, "dry": args.dry, "peak_bf16_flops": peak,
                        "model": {k: v for k, v in (DRY if args.dry else QWEN3_1_7B).items()},
                        "micro_batch_tokens": DRY_TOKENS if args.dry else TOKENS}  # fmt: skip
        for phase in PHASES:
            left = args.timeout_s - (time.monotonic() - t0)
            result[phase] = run_phase(phase, model, args.dry, work, left) if left > 10 else {"error": "no time left"}
    z3 = result["zero3"]
    result["export"] = z3.pop("export", None)
    for stage in ("zero2", "zero3"):
        ours, base = result[stage].get("tokens_per_s"), result["torch"].get("tokens_per_s")
        result[f"{stage}_vs_torch_tokens_per_s"] = ours / base if ours and base else None
        ours, base = result[stage].get("peak_gb"), result["torch"].get("peak_gb")
        result[f"{stage}_vs_torch_peak"] = ours / base if ours and base else None
    lp = result["logprobs"]
    naive, chunked = lp.get("naive"), lp.get("chunked")
    result["chunked_vs_naive_peak"] = chunked["peak_gb"] / naive["peak_gb"] if chunked and naive else None
    result["chunked_vs_naive_tokens_per_s"] = (
        chunked["tokens_per_s"] / naive["tokens_per_s"] if chunked and naive else None
    )
    result["wall_s"] = time.monotonic() - t0
    result["ok"] = not any(isinstance(v, dict) and "error" in v for v in result.values())
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
