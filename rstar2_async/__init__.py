"""rstar2-async: agentic RL in the style of rStar2-Agent, as a library.

The sub-packages follow the data flow of one RL step (DESIGN.md):

    recipe     1. the trainer takes a batch of problems; 7-8. weight sync, metrics,
               checkpoints; the rStar2 stages, evaluation, the run's engine
    rollout    2-3. many trajectories at once; each: generate -> tool calls -> tools
    reward     4. what a trajectory is worth (math grader, or your function)
    selection  5. GRPO-RoC downsampling of each finished group
    learn      6. the GRPO update on DeepSpeed (the only importer of torch)
    config     typed TOML configuration of every part
    demo       the tiny model and synthetic task of the CPU demo
    cli        the ``rstar2`` command

``types`` holds the data that crosses between them (problems, trajectories, groups)
and ``errors`` the one error tree.  Importing this package imports neither torch nor
any sub-package.
"""

from .errors import (
    CheckpointWriteError,
    ConfigError,
    DatasetError,
    GraderBrokenError,
    PluginError,
    Rstar2Error,
    ShardError,
    TrainError,
)
from .types import (
    FinishReason,
    Group,
    Problem,
    ToolCall,
    ToolResult,
    ToolStatus,
    Trajectory,
    Turn,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointWriteError",
    "ConfigError",
    "DatasetError",
    "FinishReason",
    "GraderBrokenError",
    "Group",
    "PluginError",
    "Problem",
    "Rstar2Error",
    "ShardError",
    "ToolCall",
    "ToolResult",
    "ToolStatus",
    "TrainError",
    "Trajectory",
    "Turn",
    "__version__",
]
