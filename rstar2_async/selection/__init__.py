"""Step 5 of an RL step: GRPO-RoC's Resample-on-Correct, a pure policy.

Each finished group of ``n_oversample`` trajectories is downsampled to ``n``: groups
whose rewards are all equal are dropped; positives with the fewest tool errors and
format problems are kept; negatives are sampled uniformly.  No I/O, no torch;
deterministic for a given ``random.Random``.  See ``_roc`` for the rule and its sources.
"""

from ._roc import (
    PENALTY_FLOOR,
    Dropped,
    FormatVerdict,
    RocDecision,
    default_format_check,
    format_penalty,
    roc_downsample,
    split_counts,
    tool_error_ratio,
    trajectory_penalty,
)

__all__ = [
    "Dropped",
    "FormatVerdict",
    "PENALTY_FLOOR",
    "RocDecision",
    "default_format_check",
    "format_penalty",
    "roc_downsample",
    "split_counts",
    "tool_error_ratio",
    "trajectory_penalty",
]
