"""The fleet model of benchmarks/dispatch.py (the figures' sources are in its docstring):
Qwen3-14B on H100s, rStar2's stage-1 workload (:func:`workload`), a vLLM server's state
(:class:`Server`), and the lower bound of a step's makespan (:func:`lower_bound`).
The simulation that runs it is ``fleetsim._dispatch``; benchmarks/streaming.py runs it
for many steps."""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from backends import Ticket

# Qwen3-14B in bf16 on one H100-80GB (sources in dispatch.py's docstring).
PARAMS = 14.8e9
KV_BYTES_PER_TOKEN = 40 * 8 * 128 * 2 * 2  # layers x KV heads x head_dim x (K, V) x bf16 = 160 KiB
HBM_BYTES_PER_S = 3.0e12  # ~90% of 3.35 TB/s
FLOPS = 0.5 * 989e12  # 50% of dense bf16 peak


@dataclass
class Params:
    servers: int = 8
    trajectories: int = 2048
    capacity: int = 270_000
    """KV cache per server, tokens: (0.9 x 80 GiB - 29.6 GB weights - ~3 GB activations) / 160 KiB."""
    max_num_seqs: int = 256
    t_weights: float = 2 * PARAMS / HBM_BYTES_PER_S
    """A step reads every weight: 29.6 GB at 3 TB/s = 9.9 ms, the floor of any step."""
    t_compute: float = 2 * PARAMS / FLOPS
    """GEMMs per token in a step, decoded or prefilled: 2 x 14.8e9 FLOPs at 495 TFLOP/s = 60 us."""
    t_kv: float = KV_BYTES_PER_TOKEN / HBM_BYTES_PER_S
    """Attention per token of context of a running sequence, per step: 160 KiB at 3 TB/s = 55 ns."""
    prompt: tuple[int, int] = (250, 750)
    turn_mu: float = 6.67
    turn_sigma: float = 1.0
    """Turn lengths: lognormal, mean e^(6.67 + 1/2) = 1.3K tokens, median 790."""
    max_turns: int = 5
    budget: int = 8192
    tool_tokens: tuple[int, int] = (30, 300)
    tool_mu: float = math.log(0.3) - 0.5
    tool_sigma: float = 1.0
    """Tool latency: lognormal, mean e^(mu + 1/2) = 0.3 s."""
    tool_timeout: float = 4.0
    poll_s: float = 1.0
    group: int = 1
    """Samples per problem sharing its prompt, which a server holds once for all
    of them that it runs (vLLM's prefix cache).  1: every trajectory has a prompt
    of its own (the issue's workload); rStar2 samples 32 per problem."""
    reserve: int | None = None
    """Legacy reservation cap: ``context + min(remaining budget, reserve)``; ``None``:
    expected reservations, ``context + min(remaining budget, running mean turn length)``."""
    expected: int = 1024
    """The dispatcher's first guess of a turn's length, before any turn ends."""
    headroom: float = 0.1
    hold_reports: int = 2
    """The pool's settings (headroom, holds); see :class:`backends.Dispatcher`."""
    order: str = "budget"
    """How waiting turns retry: ``budget`` (the pool's: largest remaining budget
    first, then oldest), ``fifo`` (oldest first: the pool before issue #4's
    change) or ``oracle`` (clairvoyant: most tokens the trajectory has left to
    generate first, which no real dispatcher knows; a yardstick for ordering)."""


@dataclass
class Traj:
    id: int
    prompt: int
    problem: int
    turns: list[int]
    tools: list[tuple[int, float]]
    context: int = 0
    turn: int = 0
    home: int = -1


@dataclass
class Seq:
    traj: Traj
    context: int
    target: int
    start: int = 0
    order: int = 0
    ticket: Ticket | None = None


def workload(p: Params, rng: random.Random) -> list[Traj]:
    out: list[Traj] = []
    for i in range(p.trajectories):
        turns, left = [], p.budget
        for _ in range(rng.randint(1, p.max_turns)):
            length = min(left, max(1, int(rng.lognormvariate(p.turn_mu, p.turn_sigma))))
            turns.append(length)
            left -= length
            if left <= 0:
                break
        tools = [
            (rng.randint(*p.tool_tokens), min(p.tool_timeout, rng.lognormvariate(p.tool_mu, p.tool_sigma)))
            for _ in turns[:-1]
        ]
        # The problem's prompt is drawn with its first sample: with --group 1 the
        # workload is the same as before sharing was modelled.
        prompt = rng.randint(*p.prompt) if i % p.group == 0 else out[-1].prompt
        out.append(Traj(i, prompt, i // p.group, turns, tools))
    return out


@dataclass
class Server:
    index: int
    waiting: deque[Seq] = field(default_factory=deque)
    running: dict[int, Seq] = field(default_factory=dict)  # order -> seq, in admission order
    finish: list[tuple[int, int]] = field(default_factory=list)  # (finish step, order)
    step: int = 0
    base: int = 0  # sum(context - prompt - start) over running: used = base + len(running) * step + shared
    live: dict[int, int] = field(default_factory=dict)  # problem -> running requests, which share its prompt
    shared: int = 0  # prompts of the problems running here, held once each
    dup: int = 0  # prompt tokens attended once more per extra request of a problem
    busy: bool = False
    preempted: bool = False  # in the last step: vLLM admits nothing new in a step that preempts
    prefill: int = 0
    # The prefix cache: KV of finished or preempted requests, kept in free blocks until
    # evicted, least recently freed first (traj id -> its own tokens still cached;
    # -1 - problem -> its prompt's tokens, once no request of it runs).
    cache: OrderedDict[int, int] = field(default_factory=OrderedDict)
    cached: int = 0

    def used(self) -> int:
        return self.base + len(self.running) * self.step + self.shared



def lower_bound(p: Params, trajs: list[Traj]) -> tuple[float, float]:
    """(work, critical path) in seconds; the makespan of any schedule is at least the larger.

    A step costs ``max(t_weights, t_compute * tokens) + t_kv * context``.  Summed
    over a server's steps: at least ``t_weights`` per step, ``t_compute`` per token
    decoded or prefilled, ``t_kv`` per token of context each decoded token attends
    to (``attended``, the same for every schedule).  Steps: at least ``attended /
    capacity`` (a step attends to at most the cache) and ``decoded /
    max_num_seqs``.  Work: all of it once (each prompt and tool response
    prefilled once, no recomputation), spread evenly over the servers.  Critical
    path: the slowest trajectory alone, one step per token at ``t_weights`` plus
    its own attention, and its tool calls.
    """
    decoded = prefilled = attended = repeated = 0
    critical = 0.0
    for t in trajs:
        context, own = t.prompt, 0
        prefilled += (t.prompt if t.id % p.group == 0 else 0) + sum(tokens for tokens, _ in t.tools)
        repeated += t.prompt * sum(t.turns)
        for i, n in enumerate(t.turns):
            own += n * context + n * (n - 1) // 2
            context += n + (t.tools[i][0] if i < len(t.tools) else 0)
        decoded += sum(t.turns)
        attended += own
        path = sum(t.turns) * p.t_weights + own * p.t_kv + sum(latency for _, latency in t.tools)
        critical = max(critical, path)
    # A step's requests hold their prompts once per problem: at most g - 1 of g
    # requests of a problem attend to a prompt the cache holds for another.
    steps = max((attended - repeated * (1 - 1 / p.group)) / p.capacity, decoded / p.max_num_seqs)
    work = (max(steps * p.t_weights, (decoded + prefilled) * p.t_compute) + attended * p.t_kv) / p.servers
    return work, critical
