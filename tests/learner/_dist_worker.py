"""One rank of the 2-process learner test (run by test_engine.py with RANK etc. set).

argv: model_dir out_dir. Trains ZeRO-0, 2 and 3 on the same batches, exports the
ZeRO-3 weights to out_dir/export-z3 and writes out_dir/losses.json (rank 0).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

torch.set_num_threads(1)

from _learnkit import train_fixed  # noqa: E402

model, out = Path(sys.argv[1]), Path(sys.argv[2])
result = {}
for stage in (0, 2, 3):
    losses, learner = train_fixed(model, zero_stage=stage)
    result[stage] = losses
    if stage == 3:
        learner.export(out / "export-z3")
if learner.rank == 0:
    (out / "losses.json").write_text(json.dumps(result))
learner.close()
