"""One rank of the driven-learner test: rank 0 drives with LearnerDriver, rank 1
follows; writes out_dir/driven.json (rank 0).  argv: model_dir out_dir."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

torch.set_num_threads(1)

from _learnkit import PARTITION_ALL, fixed_groups  # noqa: E402

from rstar2_async.config import LearnerConfig  # noqa: E402
from rstar2_async.learn import Learner, LearnerDriver, follow  # noqa: E402

model, out = Path(sys.argv[1]), Path(sys.argv[2])
cfg = LearnerConfig(precision="fp32", lr=1e-2, warmup_steps=2, gradient_checkpointing=False, micro_batch_tokens=96, zero_stage=2)
learner = Learner(cfg, model, deepspeed_overrides=PARTITION_ALL)
if learner.rank == 0:
    driver = LearnerDriver(learner)
    losses = [driver.grpo_step(fixed_groups(s)).loss for s in range(3)]
    driver.export(out / "driven")
    driver.close()
    (out / "driven.json").write_text(json.dumps(losses))
else:
    follow(learner)
