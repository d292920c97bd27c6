"""A resumable RL run for the kill-and-resume tests (run as a subprocess).

argv: model_dir ckpt_root log_path steps. Appends one JSON line per step to log_path
and checkpoints after every step. ``LEARNKIT_CRASH=<step>:<where>`` makes the process
die (os._exit) while saving the checkpoint of that step: ``ds`` after DeepSpeed wrote
its first file, ``publish`` just before the directory is renamed into place.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

torch.set_num_threads(1)

from _learnkit import PolicySampler, dump, rl_loop, target_reward  # noqa: E402

from rstar2_async.config import LearnerConfig  # noqa: E402
from rstar2_async.learn import Learner, load_checkpoint, save_checkpoint  # noqa: E402
from rstar2_async.learn import _checkpoint as checkpoint  # noqa: E402  (its commit point is patched)

model, root, log, steps = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
crash_step, _, crash_where = os.environ.get("LEARNKIT_CRASH", "-1:").partition(":")

cfg = LearnerConfig(zero_stage=2, precision="fp32", lr=1e-3, warmup_steps=3, weight_decay=0.0,
                    gradient_checkpointing=False, keep_checkpoints=2)
learner = Learner(cfg, model)
sampler = PolicySampler(model, target_reward, max_new_tokens=3)
state = load_checkpoint(learner, root) or {"next_step": 0}
sampler.sync(learner)


def die(*args, **kwargs):
    os._exit(17)


def on_step(step: int, rec: dict) -> None:
    dump(log, rec)
    if step == int(crash_step):
        if crash_where == "ds":
            real = torch.save
            def save_then_die(obj, f, *a, **k):  # noqa: E306
                real(obj, f, *a, **k)
                die()
            torch.save = save_then_die
        else:
            checkpoint._publish = die
    save_checkpoint(learner, root, state={"next_step": step + 1})


rl_loop(learner, sampler, steps=steps, start_step=state["next_step"], on_step=on_step)
