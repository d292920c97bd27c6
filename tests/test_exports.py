"""The public surface of the core: each package's export list, pinned (sorted, exact),
every name resolving, and no public name left out of it."""

from __future__ import annotations

import importlib
import types

import pytest

EXPORTS: dict[str, list[str]] = {
    "rstar2_async": [
        "CheckpointWriteError", "ConfigError", "DatasetError", "FinishReason", "GraderBrokenError", "Group",
        "PluginError", "Problem", "Rstar2Error", "ShardError", "ToolCall", "ToolResult", "ToolStatus", "TrainError", "Trajectory",
        "Turn", "__version__",
    ],
    "rstar2_async.config": [
        "ConfigError", "DataConfig", "EvalConfig", "EvalSection", "InferenceConfig", "LearnerConfig",
        "LocalServerConfig", "MemoryPlan", "ModelConfig", "ModelShape", "PoolConfig", "ROLLOUT_RECORD",
        "RewardConfig", "RolloutConfig", "RunConfig", "SamplingConfig", "StageConfig", "TinyModelConfig",
        "TrainConfig", "USABLE_FRACTION", "WeightSyncConfig", "check_shards", "convert", "eval_sections", "load_toml", "plan_memory",
        "read_rollout_record", "read_toml", "shard_share", "to_toml", "write_rollout_record",
    ],
    "rstar2_async.rollout": [
        "ADMISSION_BATCH", "CallError", "ChatTokenizer", "DEFAULT_SYSTEM_PROMPT", "GC_GEN0_THRESHOLD",
        "HFChatTokenizer", "JupyterTool", "PythonTool", "RUN_OPTIONS", "RolloutEngine", "RolloutStatistics", "ShardError",
        "ShardFactory", "ShardSpec", "ShardStack", "ShardedEngine", "StreamOptions", "Tool",
        "ToolContext", "ToolOutput", "Toolbox", "collect_frozen_garbage", "count_answer_blocks", "derive_seed", "load_tools",
        "parse_tool_calls", "problem_messages", "render_exec_result", "render_tool_turn", "run_trajectory", "truncate_middle", "tune_gc",
    ],
    "rstar2_async.rollout.tools": [
        "JupyterTool", "PythonTool", "Tool", "ToolContext", "ToolOutput", "jupyter", "python", "render_exec_result",
    ],
    "rstar2_async.reward": [
        "AnswerFormat", "GRADING_TIMEOUT_S", "Grader", "GraderBrokenError", "GraderStatistics", "GradingMode", "LENIENT_REL_TOL",
        "MAX_ANSWER_CHARS", "Reward", "RewardFunction", "WORKER_START_TIMEOUT_S", "answer_format", "answers_match",
        "extract_answer", "final_answer", "normalize_answer", "score",
    ],
    "rstar2_async.selection": [
        "Dropped", "FormatVerdict", "PENALTY_FLOOR", "RocDecision", "default_format_check", "format_penalty",
        "roc_downsample", "split_counts", "tool_error_ratio", "trajectory_penalty",
    ],
    "rstar2_async.learn": [
        "GrpoStats", "Learner", "LearnerDriver", "MicroBatch", "PendingExport", "SftStats", "TOKENIZER_FILES",
        "TrainSeq", "barrier", "chunked_logprobs", "collate", "encode_chat", "follow", "gather_export", "group_advantages",
        "grpo_step", "init_distributed", "iter_weight_buckets", "latest_checkpoint", "load_chat_jsonl", "load_checkpoint",
        "logprob_diff", "plan_micro_batches", "policy_loss", "probe_logprobs", "run_sft",
        "save_checkpoint", "save_hf_checkpoint", "seed_everything", "sequences_from_groups", "sft_step",
        "shard_by_tokens",
    ],
    "rstar2_async.recipe": [
        "EvalSummary", "IndexRow", "MetricsWriter", "PLOTS", "PROBE_TOLERANCE", "Publisher", "Recorded", "RolloutStack",
        "StepBar", "StreamState", "SyncCheck", "ToolRecord", "TrainState", "TrainSummary", "Trainer", "TrajectoryRecord",
        "TurnRecord", "batch_for_step", "check_reachable", "check_servers", "data_dir", "evaluate", "index_row",
        "load_finished", "load_problems",
        "majority_correct", "plot_metrics", "prepare_model", "read_metrics", "record_step", "regrade", "resolve",
        "rollout_metrics",
        "rollout_stack", "show_progress", "summarize", "to_record", "write_samples",
    ],
    "rstar2_async.view": [
        "Query", "RunDirError", "RunReader", "Table", "ViewApp", "build_report", "serve", "write_sample_run",
    ],
    "rstar2_async.demo": [
        "CHAT_TEMPLATE", "SPECIAL_TOKENS", "SYSTEM_PROMPT", "TOOL_TOKENS", "answer_text", "build_tiny_model",
        "cached_tiny_model", "default_corpus", "estimate", "guess_conversation", "ideal_conversation",
        "make_problems", "tool_call_text", "write_problems", "write_sft_transcripts",
    ],
    "rstar2_async.cli": ["main"],
    "rstar2_async.testing": [
        "ANSWER_FORMATS", "CHANGED_VALUE_REWRITES", "CHATML_TEMPLATE", "Chaos", "DropConnection", "FakeByteTokenizer",
        "FakeExactReward", "FakeModelServer", "FakeRawServer", "FakeSGLang", "FakeSandbox", "FakeVLLM",
        "GOLD_FORMATS", "IM_END", "IM_START", "ProcessGroup", "Recorded", "RestartableService", "SAME_VALUE_REWRITES",
        "STALLS", "arithmetic_policy", "changed_value_rewrites", "chaos_figures", "completion_events",
        "fake_logprobs", "hung_server", "inject_faults", "join_events", "last_user_message", "perturbed_weights",
        "pool_chaos", "raw_head", "same_value_rewrites", "sandbox_soak", "serve_http", "sse_answer",
        "stalling_stream", "sync_report", "write_byte_tokenizer",
    ],
    "fleetsim": ["DIAGNOSTICS", "PAUSE_S", "POLICIES", "Params", "Setup", "Sim", "Trainer", "lower_bound", "workload"],
}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_export_list_is_pinned_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == EXPORTS[name]
    assert module.__all__ == sorted(module.__all__)
    for export in module.__all__:
        assert hasattr(module, export), export
    if not hasattr(module, "__path__"):
        return  # a public module (rollout.tools) may import what it likes
    # Nothing public in a package that it does not export: its modules are private.
    public = {
        n for n, v in vars(module).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType) and n not in ("annotations",)
    }  # fmt: skip
    assert public <= set(module.__all__) | {"TYPE_CHECKING"}, public - set(module.__all__)
