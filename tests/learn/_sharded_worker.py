"""One rank of the sharded-loading test (run by test_sharded_loading.py with RANK etc. set).

argv: model_dir out_dir. Loads the model partitioned under ZeRO-3 while measuring this
process's peak resident memory, gathers it back and compares it with the checkpoint;
then builds a ZeRO-3 learner with a KL reference and compares the reference's
weights and step-0 logprobs with the policy's. Writes out_dir/rank<r>.json.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch

torch.set_num_threads(1)

import deepspeed
from _learnkit import PARTITION_ALL, fixed_groups, make_tiny_lm, reset_peak_rss, rss_kb
from safetensors.torch import load_file

from rstar2_async.config import LearnerConfig
from rstar2_async.learn import Learner, collate, init_distributed, sequences_from_groups
from rstar2_async.learn._loading import load_policy


def mismatches(module: torch.nn.Module, want: dict[str, torch.Tensor]) -> list[str]:
    """Names whose gathered value differs from ``want`` (a collective: every rank calls it)."""
    bad = []
    for name, p in module.named_parameters():
        with deepspeed.zero.GatheredParameters([p]):
            if not torch.equal(p.data.float(), want[name].float()):
                bad.append(name)
    return bad


model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
rank, world = init_distributed()
want = load_file(model_dir / "model.safetensors")
model_bytes = sum(t.numel() * t.element_size() for t in want.values())
ds_config = {"train_batch_size": world, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
del want  # measure the load without the reference copy resident
# A first load of a tiny model imports what loading imports (transformers' modeling
# code, torch._dynamo: ~100 MB), so that the measured load counts the weights.
if rank == 0:
    make_tiny_lm(out / "warm")  # transformers saves on rank 0 only
torch.distributed.barrier()
load_policy(out / "warm", ds_config, "sdpa")

before = reset_peak_rss()
model = load_policy(model_dir, ds_config, "sdpa")
peak = rss_kb("VmHWM") * 1024 - before
result = {"model_bytes": model_bytes, "load_peak_bytes": peak, "after_bytes": rss_kb("VmRSS") * 1024 - before}
result["local_numel"] = sum(p.ds_tensor.ds_numel for p in model.parameters())
want = load_file(model_dir / "model.safetensors")
result["policy_mismatches"] = mismatches(model, want)
del model

cfg = LearnerConfig(zero_stage=3, precision="fp32", kl_coef=0.1, gradient_checkpointing=False)
learner = Learner(cfg, model_dir, deepspeed_overrides=PARTITION_ALL)
result["ref_is_engine"] = isinstance(learner.ref_model, deepspeed.DeepSpeedEngine)
result["ref_partitioned"] = all(p.numel() == 0 for p in learner.ref_model.module.parameters())
result["learner_mismatches"] = mismatches(learner.module, want)
result["ref_mismatches"] = mismatches(learner.ref_model.module, want)
seqs = sequences_from_groups(fixed_groups(0, vocab=32))
mb = collate(seqs[rank::world])
logp, _ = learner.logprobs(mb, grad=False)
ref_logp, _ = learner.logprobs(mb, grad=False, reference=True)
result["logp_max_diff"] = float((logp - ref_logp).abs().max())
(out / f"rank{rank}.json").write_text(json.dumps(result))
learner.close()
