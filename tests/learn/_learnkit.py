"""Shared pieces of the learner tests: tiny models, an in-process policy sampler,
a verifiable toy task and the RL loop that ties them to the real learner.

The sampler stands in for the rollout engine: it produces real ``Trajectory``
objects (token ids, loss mask, sampling logprobs, weight version) from a separate
copy of the policy whose weights are synced from the learner through the broadcast
transport (:func:`rstar2_async.learn.iter_weight_buckets`). :func:`rl_loop` only
needs ``sample(problems, n) -> list[Group]`` and ``sync(learner)``, so the rollout
engine can replace :class:`PolicySampler` without touching the loop.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch

from rstar2_async.types import Group, Problem, Trajectory, Turn

EOS = 1


def make_tiny_lm(
    out: Path, *, vocab: int = 32, hidden: int = 64, layers: int = 2, seed: int = 0, tied: bool = False
) -> Path:
    """A tokenizer-free Qwen2 (head_dim 64; untied unless ``tied``) saved as a model directory."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64, head_dim=64,
        max_position_embeddings=256, tie_word_embeddings=tied, eos_token_id=EOS, pad_token_id=0,
        use_sliding_window=False,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(out)
    return out


def rss_kb(field: str) -> int:
    """A field of /proc/self/status in kB: ``VmRSS`` (resident now) or ``VmHWM`` (the
    peak since the process started or :func:`reset_peak_rss`)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak_rss() -> int:
    """Reset ``VmHWM`` to the current resident size (Linux); returns that size in bytes,
    the baseline a later peak is measured from."""
    Path("/proc/self/clear_refs").write_text("5")
    return rss_kb("VmRSS") * 1024


class Sampler(Protocol):
    def sample(self, problems: Sequence[Problem], n: int) -> list[Group]: ...
    def sync(self, learner) -> None: ...  # noqa: ANN001


class PolicySampler:
    """Samples multi-token responses from an in-process copy of the policy.

    Prompts are the problem text as space-separated token ids. Generation stops at
    EOS or ``max_new_tokens``. Uses the global torch RNG (checkpointed by the learner).
    """

    def __init__(self, model_path: Path, reward: Callable[[Problem, list[int]], float], *, max_new_tokens: int) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.reward = reward
        self.max_new_tokens = max_new_tokens
        self.version = 0

    def sync(self, learner) -> None:  # noqa: ANN001
        from rstar2_async.learn import iter_weight_buckets

        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for bucket in iter_weight_buckets(learner, bucket_mb=1, dtype=torch.float32):
                for name, t in bucket:
                    params[name].copy_(t)
        self.version = learner.global_step

    @torch.no_grad()
    def sample(self, problems: Sequence[Problem], n: int) -> list[Group]:
        prompts = [[int(x) for x in p.problem.split()] for p in problems]
        plen = len(prompts[0])
        assert all(len(p) == plen for p in prompts), "PolicySampler: prompts must have equal length"
        ids = torch.tensor([p for p in prompts for _ in range(n)])  # [B, P], B = problems * n
        done = torch.zeros(len(ids), dtype=torch.bool)
        lps: list[torch.Tensor] = []
        for _ in range(self.max_new_tokens):
            logits = self.model(input_ids=ids, use_cache=False).logits[:, -1].float()  # [B, V]
            logp = torch.log_softmax(logits, -1)  # [B, V]
            tok = torch.multinomial(logp.exp(), 1).squeeze(-1)  # [B]
            tok = torch.where(done, torch.full_like(tok, EOS), tok)
            lps.append(logp.gather(-1, tok[:, None]).squeeze(-1))
            ids = torch.cat([ids, tok[:, None]], dim=1)
            done |= tok == EOS
        groups = []
        for i, prob in enumerate(problems):
            trajs = []
            for j in range(n):
                b = i * n + j
                resp = ids[b, plen:].tolist()
                k = resp.index(EOS) + 1 if EOS in resp else len(resp)  # keep the EOS
                resp, lp = resp[:k], [float(x[b]) for x in lps[:k]]
                turn = Turn(start=0, num_generated=k, num_appended=0, weight_version=self.version,
                            finish="stop" if resp[-1] == EOS else "length", num_answer_blocks=1)  # fmt: skip
                trajs.append(
                    Trajectory(
                        problem_id=prob.id, sample_index=j, prompt_ids=prompts[i], response_ids=resp,
                        loss_mask=[1] * k, logprobs=lp, turns=[turn], finish_reason="answer",
                        weight_version=self.version, reward=self.reward(prob, resp),
                    )  # fmt: skip
                )
            groups.append(Group(problem=prob, trajectories=trajs))
        return groups


TARGET = [7, 3, 11]


def target_reward(problem: Problem, response: list[int]) -> float:
    """Verifiable reward: the share of the target's positions the response matches."""
    return sum(a == b for a, b in zip(response, TARGET)) / len(TARGET)


def target_problems(rng: random.Random, k: int, vocab: int = 32) -> list[Problem]:
    """``k`` problems whose prompts are 4 random distractor tokens."""
    return [
        Problem(id=f"q{rng.randrange(10**9)}", problem=" ".join(str(rng.randrange(4, vocab)) for _ in range(4)), answer="")
        for _ in range(k)
    ]


def rl_loop(
    learner,  # noqa: ANN001
    sampler: Sampler,
    *,
    steps: int,
    problems_per_step: int = 8,
    n_oversample: int = 16,
    n: int = 8,
    start_step: int = 0,
    on_step: Callable[[int, dict], bool | None] | None = None,
    stop_at_reward: float | None = None,
) -> list[dict]:
    """Sample, grade, downsample (GRPO-RoC), update, sync; one record per step.

    All randomness comes from the global Python and torch RNGs, so the loop is
    reproducible from a checkpoint. ``on_step`` returning True stops early. ``mean_reward`` is the mean over the oversampled
    groups before RoC (what the policy actually does).
    """
    from rstar2_async.learn import grpo_step
    from rstar2_async.selection import roc_downsample

    log = []
    for step in range(start_step, steps):
        problems = target_problems(random.Random(random.getrandbits(64)), problems_per_step)
        groups = sampler.sample(problems, n_oversample)
        mean_reward = sum(sum(g.rewards) for g in groups) / (len(groups) * n_oversample)
        kept = [d.group for g in groups if (d := roc_downsample(g, n, random)).group is not None]
        batch = [t.response_ids for g in groups for t in g.trajectories]
        rec = {"step": step, "mean_reward": mean_reward, "groups": len(kept), "batch": zlib.crc32(json.dumps(batch).encode())}
        if kept:
            st = grpo_step(learner, kept)
            rec |= {"loss": st.loss, "grad_norm": st.grad_norm, "lr": st.lr}
        sampler.sync(learner)
        log.append(rec)
        if on_step and on_step(step, rec):
            break
        if stop_at_reward is not None and mean_reward >= stop_at_reward:
            break
    return log


def dump(path: Path, rec: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(rec) + "\n")


def fixed_groups(seed: int, *, num_groups: int = 3, size: int = 6, vocab: int = 32) -> list[Group]:
    """A deterministic batch with long-tailed lengths and masked tool tokens."""
    rng = random.Random(seed)
    groups = []
    for g in range(num_groups):
        prompt = [rng.randrange(2, vocab) for _ in range(rng.randint(3, 8))]
        trajs = []
        for i in range(size):
            gen1, tool, gen2 = rng.randint(1, 12), rng.choice([0, 0, 4]), rng.randint(1, 30 if i else 60)
            resp = [rng.randrange(2, vocab) for _ in range(gen1 + tool + gen2)]
            mask = [1] * gen1 + [0] * tool + [1] * gen2
            lps = [-rng.uniform(0.5, 4.0) if m else 0.0 for m in mask]
            turns = [Turn(start=0, num_generated=gen1, num_appended=tool, weight_version=0, finish="stop")]
            trajs.append(
                Trajectory(
                    problem_id=f"g{g}", sample_index=i, prompt_ids=prompt, response_ids=resp, loss_mask=mask,
                    logprobs=lps, turns=turns, finish_reason="answer", weight_version=0, reward=float(i % 2),
                )  # fmt: skip
            )
        groups.append(Group(problem=Problem(id=f"g{g}", problem="", answer=""), trajectories=trajs))
    return groups


PARTITION_ALL = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}
"""DeepSpeed keeps parameters under 1e5 elements whole on every rank under ZeRO-3 by
default, which would be every parameter of a tiny model: partition them all."""


def train_fixed(model_path: Path, *, steps: int = 3, **overrides) -> tuple[list[float], object]:  # noqa: ANN003
    """Fresh learner on ``model_path``; ``steps`` GRPO updates on :func:`fixed_groups`;
    returns ``(losses, learner)``."""
    from rstar2_async.config import LearnerConfig
    from rstar2_async.learn import Learner, grpo_step

    cfg = LearnerConfig(**(dict(precision="fp32", lr=1e-2, warmup_steps=2, gradient_checkpointing=False,
                                micro_batch_tokens=96) | overrides))  # fmt: skip
    learner = Learner(cfg, model_path, deepspeed_overrides=PARTITION_ALL)
    losses = [grpo_step(learner, fixed_groups(s)).loss for s in range(steps)]
    return losses, learner
