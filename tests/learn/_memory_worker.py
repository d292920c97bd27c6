"""Measure one learner's peak memory on CPU (run by test_memory_plan.py, one process
per measurement so that peaks do not mix).

argv: model_dir warm_model_dir zero_stage gradient_checkpointing(0/1) tokens.
Prints a JSON line: the peak resident memory added by building the learner and
taking two optimizer steps on one packed micro-batch of ``tokens`` tokens, and the
plan's estimate.
"""

import gc
import json
import sys
from pathlib import Path

import torch

torch.set_num_threads(1)

from _learnkit import reset_peak_rss, rss_kb

from rstar2_async.config import LearnerConfig, ModelShape, plan_memory
from rstar2_async.learn import Learner, TrainSeq, collate


def steps(learner: Learner, tokens: int, vocab: int, n: int) -> None:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, vocab, (tokens,), generator=g).tolist()
    mb = collate([TrainSeq(ids=ids, mask=[1] * len(ids), logprobs=[-1.0] * len(ids))])  # T = tokens
    for _ in range(n):
        logp, _ = learner.logprobs(mb)
        learner.backward(-logp.mean(), last=True)
        learner.step()


model, warm, stage, ckpt, tokens = Path(sys.argv[1]), Path(sys.argv[2]), *map(int, sys.argv[3:])
cfg = LearnerConfig(precision="fp32", zero_stage=stage, gradient_checkpointing=bool(ckpt), micro_batch_tokens=tokens)
# A tiny learner first: imports, DeepSpeed's set-up and the kernels' first-use
# allocations are not the model's.
small = Learner(cfg, warm)
steps(small, 64, 32, 1)
del small
gc.collect()
before = reset_peak_rss()
learner = Learner(cfg, model)
steps(learner, tokens, ModelShape.from_dir(model).vocab, 2)
measured = rss_kb("VmHWM") * 1024 - before
plan = plan_memory(ModelShape.from_dir(model), cfg, ranks=1, device_bytes=None)
print(json.dumps({"measured": measured, "estimated": plan.total, "plan": plan.line()}))
