"""A discrete-event model of an inference fleet under rStar2's workload, to compare
dispatch and sync policies at a scale no test machine has (Qwen3-14B on H100s; the
calibration and its sources are in ``benchmarks/dispatch.py``'s docstring).

- :class:`Sim`: one rollout step of the fleet, turns dispatched round-robin or by
  :class:`backends.Dispatcher` (``benchmarks/dispatch.py``).
- :class:`Trainer`: many steps of a trainer over the fleet, on-policy or streaming, with
  its weight syncs (``benchmarks/streaming.py``); :class:`Setup` sizes it and
  :data:`POLICIES` / :data:`DIAGNOSTICS` name the modes it compares.

It imports only ``backends`` (the dispatcher it models), never the core.
"""

from ._dispatch import Sim
from ._model import Params, lower_bound, workload
from ._setup import DIAGNOSTICS, PAUSE_S, POLICIES, Setup
from ._trainer import Trainer

__all__ = ["DIAGNOSTICS", "PAUSE_S", "POLICIES", "Params", "Setup", "Sim", "Trainer", "lower_bound", "workload"]
