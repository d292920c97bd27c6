"""Steps 2-3 of an RL step: trajectories, many at once, against an inference engine.

:class:`RolloutEngine` runs ``n`` trajectories per problem as tasks in one task
group, admission-controlled, and streams out each problem's :class:`~rstar2_async.types.Group`
the moment it is complete.  Each trajectory is :func:`run_trajectory`'s loop:
generate (token ids in, token ids and logprobs out) -> parse tool calls
(rStar2's ``<tool_call>`` format) -> run them (the :class:`Tool` protocol; shipped in
:mod:`rstar2_async.rollout.tools`) -> append the tool turn (masked out of the loss) ->
repeat, until an answer, the turn limit or the token budget.

:class:`ShardedEngine` is the same contract over N worker processes, each with its own
engine over its share of the servers (built by a factory from a :class:`ShardSpec`):
``_shards`` (the parent), ``_shard_books`` (its bookkeeping), ``_shard_process`` (one
worker's process), ``_shard_worker`` (the child), ``_shard_wire`` (their messages).

Reading order: ``_engine`` (many trajectories), ``_agent`` (one), ``_conversation``
(its tokens), ``_toolcall`` (the format), ``_toolbox`` and ``tools`` (the tools),
``_chat_template`` (the model's template, applied without re-tokenising).
Importing this package imports neither torch nor transformers.
"""

from ._agent import problem_messages, run_trajectory
from ._chat_template import ChatTokenizer, HFChatTokenizer
from ..errors import ShardError
from ._engine import ADMISSION_BATCH, RolloutEngine, RolloutStatistics, StreamOptions
from ._shard_wire import ShardFactory, ShardSpec, ShardStack
from ._shards import ShardedEngine
from ._seeds import derive_seed
from ._runtime import GC_GEN0_THRESHOLD, RUN_OPTIONS, collect_frozen_garbage, tune_gc
from ._toolbox import DEFAULT_SYSTEM_PROMPT, Toolbox, load_tools
from ._toolcall import (
    CallError,
    count_answer_blocks,
    parse_tool_calls,
    render_tool_turn,
    truncate_middle,
)
from .tools import (
    JupyterTool,
    PythonTool,
    Tool,
    ToolContext,
    ToolOutput,
    render_exec_result,
)

__all__ = [
    "ADMISSION_BATCH",
    "CallError",
    "ChatTokenizer",
    "DEFAULT_SYSTEM_PROMPT",
    "GC_GEN0_THRESHOLD",
    "HFChatTokenizer",
    "JupyterTool",
    "PythonTool",
    "RUN_OPTIONS",
    "RolloutEngine",
    "RolloutStatistics",
    "ShardError",
    "ShardFactory",
    "ShardSpec",
    "ShardStack",
    "ShardedEngine",
    "StreamOptions",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "Toolbox",
    "collect_frozen_garbage",
    "count_answer_blocks",
    "derive_seed",
    "load_tools",
    "parse_tool_calls",
    "problem_messages",
    "render_exec_result",
    "render_tool_turn",
    "run_trajectory",
    "truncate_middle",
    "tune_gc",
]
