"""Peak memory and speed of one forward+backward of the log-probs and entropies: the
whole [T, V] float32 logits (the learner before ``_logprobs``) against the chunked
output layer the learner uses, at the paper's vocabulary.

Each variant runs in a fresh process (``--child``): torch's CPU allocations show in
the peak RSS (``resource.getrusage``), from which the process's RSS before the
forward (torch imported, inputs built) is subtracted. Both compute
``loss = logp . a + entropy . b`` from the same hidden states [T, H] and output
layer weight [V, H] (float32, seed 0) and backpropagate into both; the chunked one
uses ``learner.logprob_chunk_tokens``' default unless ``--chunk`` says otherwise.
Variants alternate over ``--rounds`` (the machine is shared); tokens/s is the median.

    .venv/bin/python benchmarks/learner_memory.py            # T 8192, V 151936, H 256
    .venv/bin/python benchmarks/learner_memory.py --tokens 4096   # where 8192 does not fit

The naive variant needs ~5 [T, V] float32 tensors (23 GB at T 8192): the script
refuses to start when MemAvailable is smaller.

Prints one JSON line last: peaks (MB), tokens/s, and ``chunked_vs_naive_peak``
(target <= 1/6) and ``chunked_vs_naive_tokens_per_s`` (target >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def _available_mb() -> float:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) / 1024


def child(variant: str, tokens: int, vocab: int, hidden: int, chunk: int) -> dict:
    import torch

    from rstar2_async.learn import chunked_logprobs

    torch.manual_seed(0)
    h = torch.randn(tokens, hidden).requires_grad_()  # [T, H]
    w = (0.05 * torch.randn(vocab, hidden)).requires_grad_()  # [V, H]
    y = torch.randint(0, vocab, (tokens,))  # [T]
    a, b = torch.randn(tokens), torch.randn(tokens)  # [T] upstream gradients
    base = _rss_mb()
    t0 = time.perf_counter()
    if variant == "naive":
        logits = (h @ w.T).float()  # [T, V]
        lse = torch.logsumexp(logits, dim=-1)  # [T]
        logp = logits.gather(-1, y[:, None]).squeeze(-1) - lse  # [T]
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # [T]
    else:
        cols = chunked_logprobs(h, w, y, chunk=chunk, entropy=True)  # [T, 2]
        logp, ent = cols[:, 0], cols[:, 1]
    (logp @ a + ent @ b).backward()
    seconds = time.perf_counter() - t0
    return {"peak_mb": _rss_mb() - base, "seconds": seconds, "grad_norm": float(torch.linalg.vector_norm(w.grad))}


def main() -> None:
    from rstar2_async.config import LearnerConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=LearnerConfig().logprob_chunk_tokens)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", choices=["naive", "chunked"])
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.tokens, args.vocab, args.hidden, args.chunk)))
        return

    # The naive peak is ~4.6 [T, V] float32 tensors (measured): refuse rather than
    # push a shared machine into the OOM killer.
    need_mb = 5 * args.tokens * args.vocab * 4 / 2**20
    if need_mb > _available_mb():
        sys.exit(
            f"naive needs ~{need_mb:.0f} MB at --tokens {args.tokens}, {_available_mb():.0f} MB available: lower --tokens"
        )
    runs: dict[str, list[dict]] = {"naive": [], "chunked": []}
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    for r in range(args.rounds):
        for variant in ("naive", "chunked"):
            cmd = [sys.executable, __file__, "--child", variant] + [
                f"--{k}={getattr(args, k)}" for k in ("tokens", "vocab", "hidden", "chunk")
            ]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            runs[variant].append(json.loads(out.strip().splitlines()[-1]))
            print(f"round {r} {variant}: {runs[variant][-1]}", file=sys.stderr)
    peak = {v: max(x["peak_mb"] for x in rs) for v, rs in runs.items()}
    tps = {v: statistics.median(args.tokens / x["seconds"] for x in rs) for v, rs in runs.items()}
    # Same inputs, same loss: the weight gradients must agree (a check, not a timing).
    norms = [rs[0]["grad_norm"] for rs in runs.values()]
    assert abs(norms[0] - norms[1]) <= 1e-4 * norms[0], f"weight gradient norms differ: {norms}"
    rec = {
        "tokens": args.tokens, "vocab": args.vocab, "hidden": args.hidden, "chunk": args.chunk, "rounds": args.rounds,
        "naive_peak_mb": round(peak["naive"]), "chunked_peak_mb": round(peak["chunked"]),
        "naive_tokens_per_s": round(tps["naive"], 1), "chunked_tokens_per_s": round(tps["chunked"], 1),
        "chunked_vs_naive_peak": round(peak["chunked"] / peak["naive"], 4),
        "chunked_vs_naive_tokens_per_s": round(tps["chunked"] / tps["naive"], 3),
    }  # fmt: skip
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
