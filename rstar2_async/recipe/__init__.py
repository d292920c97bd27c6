"""Steps 1, 7 and 8 of an RL step, and the recipe that repeats them: rStar2's stages.

:class:`Trainer` (``_trainer``) is the loop, read top to bottom: a batch of problems
(``_data``), the rollout and its reward through the run's one engine (built by
``_stack`` with its servers, sandbox and grader), GRPO-RoC, the learner's update,
export and weight sync, then metrics (``_metrics``), evaluation (``_evaluate``) and
checkpoints.  ``_builders`` makes the stack's parts; with ``rollout.shards`` each
rollout worker process builds its own from them (``_shard_stack``).  ``_ahead`` runs a rollout one step ahead when staleness is allowed;
``_state`` is what a checkpoint keeps.  Importing this package imports no torch (the
trainer imports the learner when it runs).
"""

from ._data import batch_for_step, data_dir, load_problems, resolve
from ._evaluate import EvalSummary, evaluate, load_finished, majority_correct, regrade, summarize
from ._metrics import (
    PLOTS,
    MetricsWriter,
    plot_metrics,
    read_metrics,
    rollout_metrics,
    write_samples,
)
from ._progress import StepBar, show_progress
from ._publish import Publisher, check_servers
from ._stack import RolloutStack, check_reachable, rollout_stack
from ._state import StreamState, TrainState, TrainSummary, prepare_model
from ._sync_check import PROBE_TOLERANCE, SyncCheck
from ._trainer import Trainer
from ._trajectories import (
    IndexRow,
    Recorded,
    ToolRecord,
    TrajectoryRecord,
    TurnRecord,
    index_row,
    record_step,
    to_record,
)

__all__ = [
    "EvalSummary",
    "IndexRow",
    "MetricsWriter",
    "PLOTS",
    "PROBE_TOLERANCE",
    "Publisher",
    "Recorded",
    "RolloutStack",
    "StepBar",
    "StreamState",
    "SyncCheck",
    "ToolRecord",
    "TrainState",
    "TrainSummary",
    "Trainer",
    "TrajectoryRecord",
    "TurnRecord",
    "batch_for_step",
    "check_reachable",
    "check_servers",
    "data_dir",
    "evaluate",
    "index_row",
    "load_finished",
    "load_problems",
    "majority_correct",
    "plot_metrics",
    "prepare_model",
    "read_metrics",
    "record_step",
    "regrade",
    "resolve",
    "rollout_metrics",
    "rollout_stack",
    "show_progress",
    "summarize",
    "to_record",
    "write_samples",
]
