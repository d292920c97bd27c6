"""Learner throughput: our DeepSpeed GRPO step against a plain PyTorch loop, packing
against padding to the longest, and ZeRO-3 weight export speed.

    .venv/bin/python benchmarks/learner_step.py [--reps 5] [--quick]

All in one process and one run, on CPU with gloo (one rank), one thread:

1. ``ds_vs_torch``: tokens/s of :func:`rstar2_async.learn.grpo_step` on a
   ZeRO-``--stage`` engine (default 2, the config default) divided by tokens/s of a
   plain PyTorch loop (same model, same packed micro-batches, same loss, AdamW,
   ``clip_grad_norm_``). The two alternate, ``--reps`` times each; medians. Target
   >= 0.8. ``ds_vs_torch_by_stage`` repeats it for ZeRO-0.
2. ``padding_waste``: padded tokens / computed tokens of our packed micro-batches
   (first-fit decreasing under ``micro_batch_tokens``) on a long-tailed length mix
   (log-normal, median ~90, tail to 1024). Target < 0.05. ``padded_waste`` is the
   same for batches of ``--pad-batch`` sequences padded to their longest;
   ``pack_fill`` is how full the micro-batches are (tokens / (bins x budget)); and
   ``speedup_vs_padded`` is the padded step's median time over the packed step's,
   both on our engine.
3. ``export_s_per_gb``: seconds per GB (fp32 bytes written) of
   :func:`rstar2_async.learn.save_hf_checkpoint` from a ZeRO-3 engine, median.

Progress goes to stderr; the last stdout line is the JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rstar2_async.config import LearnerConfig  # noqa: E402
from rstar2_async.learn import (  # noqa: E402  # noqa: E402
    Learner,  # noqa: E402
    collate,
    grpo_step,
    plan_micro_batches,
    policy_loss,
    save_hf_checkpoint,  # noqa: E402
    sequences_from_groups,
)
from rstar2_async.types import Group, Problem, Trajectory, Turn  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_model(out: Path, *, hidden: int, layers: int, vocab: int) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
        num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 128), head_dim=64,
        max_position_embeddings=2048, tie_word_embeddings=False, use_sliding_window=False,
    )  # fmt: skip
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    return out


def long_tailed_groups(seed: int, *, groups: int, size: int, vocab: int) -> list[Group]:
    """Log-normal response lengths (median ~90 tokens, a tail to 1024), 32-token prompts,
    a masked tool block in a third of them; rewards alternate 0/1."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        prompt = [rng.randrange(vocab) for _ in range(32)]
        trajs = []
        for i in range(size):
            n = min(1024, max(8, int(rng.lognormvariate(4.5, 0.9))))
            tool = 16 if i % 3 == 0 and n > 40 else 0
            mask = [1] * (n - tool - 8) + [0] * tool + [1] * 8
            trajs.append(
                Trajectory(
                    problem_id=f"g{g}", sample_index=i, prompt_ids=prompt,
                    response_ids=[rng.randrange(vocab) for _ in range(n)], loss_mask=mask,
                    logprobs=[-rng.uniform(2, 8) if m else 0.0 for m in mask],
                    turns=[Turn(start=0, num_generated=n - tool, num_appended=tool, weight_version=0, finish="stop")],
                    finish_reason="answer", weight_version=0, reward=float(i % 2),
                )  # fmt: skip
            )
        out.append(Group(problem=Problem(id=f"g{g}", problem="", answer=""), trajectories=trajs))
    return out


class TorchBaseline:
    """The same update as grpo_step, written as a plain PyTorch loop (no DeepSpeed)."""

    def __init__(self, model_path: Path, cfg: LearnerConfig) -> None:
        from transformers import AutoModelForCausalLM

        self.cfg = cfg
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def step(self, groups: list[Group]) -> int:
        seqs = sequences_from_groups(groups)
        mbs = [collate([seqs[i] for i in b]) for b in plan_micro_batches([len(s) for s in seqs], self.cfg.micro_batch_tokens)]
        n_tok = sum(mb.num_loss_tokens for mb in mbs)
        for mb in mbs:
            logits = self.model(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False).logits[0].float()
            lse = torch.logsumexp(logits, -1)  # [T]
            logp = logits.gather(-1, mb.targets[:, None]).squeeze(-1) - lse  # [T]
            with torch.no_grad():  # grpo_step measures the entropy every step (a health signal)
                ent = lse - (torch.softmax(logits, -1) * logits).sum(-1)  # [T]
            loss, _ = policy_loss(logp, mb.old_logprobs, mb.advantages, mb.mask, clip_low=0.2, clip_high=0.28,
                                  clip_c=self.cfg.clip_c, entropy=ent)  # fmt: skip
            (loss / n_tok).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return sum(mb.num_tokens for mb in mbs)


def padded_step(learner: Learner, groups: list[Group], batch: int) -> tuple[int, int]:
    """GRPO step with batches of ``batch`` sequences padded to their longest.
    Returns (real tokens, computed tokens)."""
    seqs = sequences_from_groups(groups)
    chunks = [seqs[i : i + batch] for i in range(0, len(seqs), batch)]
    n_tok = sum(sum(s.mask[1:]) for s in seqs)
    real = computed = 0
    for k, chunk in enumerate(chunks):
        width = max(len(s) for s in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)  # [B, L]
        att = torch.zeros(len(chunk), width, dtype=torch.long)  # [B, L]
        tgt = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width)
        old = torch.zeros(len(chunk), width)
        adv = torch.zeros(len(chunk), width)
        for b, s in enumerate(chunk):
            n = len(s)
            ids[b, :n] = torch.tensor(s.ids)
            att[b, :n] = 1
            tgt[b, : n - 1] = torch.tensor(s.ids[1:])
            mask[b, : n - 1] = torch.tensor(s.mask[1:], dtype=torch.float32)
            old[b, : n - 1] = torch.tensor(s.logprobs[1:])
            adv[b, :n] = s.advantage
        real += sum(len(s) for s in chunk)
        computed += ids.numel()
        logits = learner.engine(input_ids=ids, attention_mask=att, use_cache=False).logits.float()  # [B, L, V]
        logp = logits.gather(-1, tgt[..., None]).squeeze(-1) - torch.logsumexp(logits, -1)  # [B, L]
        loss, _ = policy_loss(logp.flatten(), old.flatten(), adv.flatten(), mask.flatten(), clip_low=0.2, clip_high=0.28)
        learner.backward(loss / n_tok, last=k == len(chunks) - 1)
    learner.step()
    return real, computed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--stage", type=int, default=2)
    ap.add_argument("--pad-batch", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="smaller model and batch (smoke run)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    hidden, layers, vocab = (128, 2, 1024) if args.quick else (256, 4, 4096)
    n_groups = 2 if args.quick else 4
    tmp = Path(tempfile.mkdtemp(prefix="learner-bench-"))
    model = make_model(tmp / "model", hidden=hidden, layers=layers, vocab=vocab)
    cfg = LearnerConfig(
        zero_stage=args.stage, precision="fp32", lr=1e-5, warmup_steps=0, gradient_checkpointing=False,
        micro_batch_tokens=2048, weight_decay=0.0,
    )  # fmt: skip
    groups = [long_tailed_groups(s, groups=n_groups, size=8, vocab=vocab) for s in range(args.reps + 1)]

    # 1. DeepSpeed step vs plain torch, alternating; rep 0 is a warm-up for both.
    result: dict[str, object] = {}
    ratios = {}
    for stage in dict.fromkeys([args.stage, 0]):
        learner = Learner(msgspec_replace(cfg, zero_stage=stage), model)
        base = TorchBaseline(model, cfg)
        ours, theirs = [], []
        for r, g in enumerate(groups):
            t0 = time.perf_counter()
            st = grpo_step(learner, g)
            t1 = time.perf_counter()
            tokens = base.step(g)
            t2 = time.perf_counter()
            assert tokens == st.tokens, (tokens, st.tokens)
            if r:
                ours.append(tokens / (t1 - t0))
                theirs.append(tokens / (t2 - t1))
            log(f"ZeRO-{stage} rep {r}: ours {tokens / (t1 - t0):.0f} tok/s, torch {tokens / (t2 - t1):.0f} tok/s")
        ratios[stage] = statistics.median(ours) / statistics.median(theirs)
        if stage == args.stage:
            result |= {"ds_tokens_per_s": round(statistics.median(ours)), "torch_tokens_per_s": round(statistics.median(theirs))}
            packed_learner = learner
    result["ds_vs_torch"] = round(ratios[args.stage], 3)
    result["ds_vs_torch_by_stage"] = {f"zero{k}": round(v, 3) for k, v in ratios.items()}

    # 2. Packing vs padding to the longest, same engine, alternating.
    learner = packed_learner
    packed_t, padded_t = [], []
    real = computed_packed = computed_padded = n_bins = 0
    for r, g in enumerate(groups):
        seqs = sequences_from_groups(g)
        bins = plan_micro_batches([len(s) for s in seqs], cfg.micro_batch_tokens)
        t0 = time.perf_counter()
        grpo_step(learner, g)
        t1 = time.perf_counter()
        rr, cc = padded_step(learner, g, args.pad_batch)
        t2 = time.perf_counter()
        real += rr
        computed_packed += sum(sum(len(seqs[i]) for i in b) for b in bins)  # one row per bin, no padding
        n_bins += len(bins)
        computed_padded += cc
        if r:
            packed_t.append(t1 - t0)
            padded_t.append(t2 - t1)
        log(f"rep {r}: packed {t1 - t0:.2f}s, padded {t2 - t1:.2f}s")
    result["padding_waste"] = round(1 - real / computed_packed, 4)
    result["padded_waste"] = round(1 - real / computed_padded, 4)
    result["pack_fill"] = round(real / (n_bins * cfg.micro_batch_tokens), 4)
    result["speedup_vs_padded"] = round(statistics.median(padded_t) / statistics.median(packed_t), 3)
    lengths = [len(s) for g in groups for s in sequences_from_groups(g)]
    result["lengths"] = {"median": statistics.median(lengths), "max": max(lengths), "n": len(lengths)}

    # 3. Export from ZeRO-3: a wider model so bytes, not overhead, dominate.
    big = make_model(tmp / "big", hidden=256 if args.quick else 512, layers=4 if args.quick else 8, vocab=vocab)
    z3 = Learner(msgspec_replace(cfg, zero_stage=3), big)
    times = []
    for r in range(3):
        t0 = time.perf_counter()
        out = save_hf_checkpoint(z3, tmp / "export", dtype=torch.float32)
        times.append(time.perf_counter() - t0)
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    result["export_s_per_gb"] = round(statistics.median(times) / (size / 1e9), 2)
    result["export_gb"] = round(size / 1e9, 4)
    result["model_params"] = sum(p.numel() for p in packed_learner.module.parameters())
    result["reps"] = args.reps
    print(json.dumps(result))


def msgspec_replace(cfg: LearnerConfig, **kw: object) -> LearnerConfig:
    import msgspec

    return msgspec.structs.replace(cfg, **kw)


if __name__ == "__main__":
    main()
