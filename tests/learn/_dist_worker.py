"""One rank of the 2-process learner test (run by test_deepspeed.py with RANK etc. set;
also runs as is under ``torchrun --nproc_per_node 2`` or ``deepspeed --num_gpus 2``).

argv: model_dir out_dir. Trains ZeRO-0, 2 and 3 on the same batches, exports the
ZeRO-3 weights to out_dir/export-z3, checkpoints the ZeRO-3 run, resumes it in a fresh
learner and takes one more step in both; writes out_dir/losses.json (rank 0).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

torch.set_num_threads(1)

from _learnkit import fixed_groups, train_fixed  # noqa: E402

from rstar2_async.learn import grpo_step, load_checkpoint, save_checkpoint, save_hf_checkpoint  # noqa: E402

args = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]  # the deepspeed launcher adds it
model, out = Path(args[0]), Path(args[1])
result = {}
for stage in (0, 2, 3):
    losses, learner = train_fixed(model, zero_stage=stage)
    result[stage] = losses
    if stage == 3:
        save_hf_checkpoint(learner, out / "export-z3")
        save_checkpoint(learner, out / "ckpt", state={"next": 3})
        _, resumed = train_fixed(model, zero_stage=3, steps=0)
        state = load_checkpoint(resumed, out / "ckpt")
        step = resumed.global_step
        result["resume"] = [grpo_step(x, fixed_groups(3)).loss for x in (learner, resumed)] + [state, step]
if learner.rank == 0:
    (out / "losses.json").write_text(json.dumps(result))
learner.close()
