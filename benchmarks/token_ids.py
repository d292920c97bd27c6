"""A trajectory's context as the token client sends it: ``list[int]`` against ``TokenIds``.

Each turn sends the whole context as the prompt.  Before, the conversation kept it
as a ``list[int]`` and every request encoded all of it again; now it is a
:class:`backends.TokenIds` (the list with its JSON beside it, extended by each
turn's new ids) and the request splices the JSON in.  Both run here through the
real ``TokenClient._body`` (the request's bytes) on the same ids, grown as
``rstar2_async.rollout.TokenConversation._extend`` grows them (the baseline as it
did before: the prompt shared until the first generation, then ``prompt + ids``
and ``+=``).

The workload is ``benchmarks/paper_scale.py``'s trajectory with a real
vocabulary: a 1,100-id prompt, 11 turns of ``--generated`` ids (240) with a
``--tool``-id (60) tool response after each of the first 10 (~4.3K ids at the
end), ids drawn uniformly from Qwen's 151,936 (above 256 each is an int object of
its own).  Each turn's new ids are decoded from JSON, as the token client and the
tokenizer make them: that cost is the same in both.

``--engine sglang``: the same through SGLang's client, whose baseline did more:
the ids copied into a list, the body encoded by httpx's ``json=`` (the stdlib's
encoder) and the request built by httpx's client (``build_request``: URL and
header merging; its send's auth, redirect and hook layers are left out, so the
baseline is a lower bound), where it now sends msgspec's bytes, with the JSON
spliced in, straight to the transport as the vLLM client does.

Figures: ``us_per_turn`` (CPU of decoding each turn's new ids, growing the
context, building the request, and the trajectory's ``response_ids`` at its end,
per turn, over whole trajectories, medians of interleaved repeats) for each and
their ratio ``turn_cpu_ratio``; ``bytes_per_token`` of the contexts of
``--trajectories`` finished trajectories held at once (tracemalloc: the prompt's
ids shared as the engine shares them), ``memory_ratio`` (list over ours), and
what 16,384 such trajectories in flight hold (``gb_at_16384``).

Usage: ``python benchmarks/token_ids.py [--repeats 7] [--trajectories 512]
[--generated 240] [--tool 60] [--engine vllm|sglang]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # backends

import httpx
import msgspec

from backends import SamplingParams, SGLangTokenClient, TokenClient, TokenIds

VOCAB = 151_936
PROMPT, TURNS = 1100, 11
MAX_TOKENS = 1024  # the request's, a number like any other
_encode, _decode = msgspec.json.encode, msgspec.json.Decoder(list[int]).decode
Body = Callable[[Sequence[int]], object]


def trajectory(rng: random.Random, generated: int, tool: int) -> list[bytes]:
    """The ids each turn adds, as JSON: a generation, then (but after the last) a tool
    response.  Each run decodes them, so that its ids are fresh int objects, as the
    token client's decoder and the tokenizer make them."""
    pieces = []
    for turn in range(TURNS):
        pieces.append(_encode([rng.randrange(VOCAB) for _ in range(generated)]))
        if turn < TURNS - 1:
            pieces.append(_encode([rng.randrange(VOCAB) for _ in range(tool)]))
    return pieces


def bodies(engine: str) -> dict[str, Body]:
    """How each side builds a turn's request from its context."""
    sampling = SamplingParams(temperature=1.0)
    if engine == "vllm":
        client = TokenClient("http://unused/v1", model="m", stream=False)  # only its request encoding runs

        def vllm(ids: Sequence[int]) -> object:
            return client._body(ids, MAX_TOKENS, sampling)  # splices a TokenIds' JSON, encodes a list whole

        return {"list": vllm, "token_ids": vllm}
    encode = SGLangTokenClient("http://unused", stream=False)._body  # the body before streaming, as the baseline's
    params = msgspec.json.decode(encode([], MAX_TOKENS, sampling))["sampling_params"]
    http = httpx.AsyncClient(base_url="http://unused", headers={"authorization": "Bearer k"})

    def before(ids: Sequence[int]) -> object:  # SGLangTokenClient before TokenIds: through httpx's client
        body = {"input_ids": list(ids), "sampling_params": params, "return_logprob": True}
        return http.build_request("POST", "/generate", json=body)

    def ours(ids: Sequence[int]) -> object:  # the bytes its transport sends
        return encode(ids, MAX_TOKENS, sampling)

    return {"list": before, "token_ids": ours}


def run_list(body: Body, prompt: list[int], pieces: list[bytes]) -> list[int]:
    ids = prompt
    body(ids)
    for i, raw in enumerate(pieces):
        piece = _decode(raw)
        if ids is prompt:  # the first tokens of its own: the copy
            ids = prompt + piece
        else:
            ids += piece
        if i % 2 == 1:  # after a tool response: the next turn's request
            body(ids)
    ids[PROMPT:]  # the trajectory's response_ids, at its end
    return ids


def run_token_ids(body: Body, prompt: list[int], pieces: list[bytes]) -> TokenIds:
    body(prompt)
    ids = TokenIds(prompt)
    for i, raw in enumerate(pieces):
        ids.extend(_decode(raw))
        if i % 2 == 1:
            body(ids)
    ids[PROMPT:]
    return ids


RUNS = {"list": run_list, "token_ids": run_token_ids}


def cpu_per_turn(name: str, body: Body, work: list[tuple[list[int], list[bytes]]]) -> float:
    run = RUNS[name]
    gc.collect()
    start = time.process_time()
    for prompt, pieces in work:
        run(body, prompt, pieces)
    return (time.process_time() - start) / (len(work) * TURNS) * 1e6


def bytes_per_token(name: str, body: Body, work: list[tuple[list[int], list[bytes]]]) -> float:
    gc.collect()
    tracemalloc.start()
    kept = [RUNS[name](body, prompt, pieces) for prompt, pieces in work]
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tokens = sum(len(ids) for ids in kept)
    return held / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--trajectories", type=int, default=512)
    parser.add_argument("--generated", type=int, default=240, help="ids a turn generates")
    parser.add_argument("--tool", type=int, default=60, help="ids of a tool response")
    parser.add_argument("--engine", choices=["vllm", "sglang"], default="vllm", help="whose client builds the request")
    args = parser.parse_args()
    rng = random.Random(0)
    prompts = [[rng.randrange(VOCAB) for _ in range(PROMPT)] for _ in range(args.trajectories // 32 or 1)]
    # 32 samples a prompt, which they share as the engine's groups do
    work = [(prompts[i % len(prompts)], trajectory(rng, args.generated, args.tool)) for i in range(args.trajectories)]
    body = bodies(args.engine)
    cpu: dict[str, list[float]] = {name: [] for name in RUNS}
    for _ in range(args.repeats):  # interleaved: the machine's load falls on both alike
        for name in RUNS:
            cpu[name].append(cpu_per_turn(name, body[name], work))
    memory = {name: bytes_per_token(name, body[name], work) for name in RUNS}
    tokens = PROMPT + TURNS * args.generated + (TURNS - 1) * args.tool
    out: dict[str, Any] = {"benchmark": "token_ids", "engine": args.engine, "trajectories": args.trajectories, "repeats": args.repeats,
                           "tokens_per_trajectory": tokens}  # fmt: skip
    for name in RUNS:
        out[f"{name}_us_per_turn"] = round(statistics.median(cpu[name]), 2)
        out[f"{name}_bytes_per_token"] = round(memory[name], 2)
        out[f"{name}_gb_at_16384"] = round(memory[name] * tokens * 16_384 / 1e9, 2)
    out["turn_cpu_ratio"] = round(out["list_us_per_turn"] / out["token_ids_us_per_turn"], 2)
    out["memory_ratio"] = round(memory["list"] / memory["token_ids"], 2)
    out["loadavg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
