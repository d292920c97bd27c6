"""Streamed completions as the test doubles send them: vLLM's ``/v1/completions``
chunks (``data: {json}`` server-sent events, then ``data: [DONE]``; the shape read
in vLLM 0.32's ``completion_stream_generator``), and a whole answer made again from
them (for doubles that rewrite an answer before sending it)."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["DONE", "completion_events", "join_events", "sse_answer"]

DONE = b"data: [DONE]\n\n"


def completion_events(answer: dict[str, Any], interval: int = 1) -> list[bytes]:
    """A whole completion answer (one choice, ``token_ids`` and ``logprobs``) as the
    events of its stream, as vLLM cuts it: the first token alone, then ``interval``
    tokens a chunk (the finish reason on the last; ``weight_version``, if the
    answer has one, on every chunk), without ``[DONE]``.  The first chunk repeats the prompt's ids when the answer has them
    (``prompt_token_ids``), as vLLM's does."""
    choice = answer["choices"][0]
    ids: list[int] = choice["token_ids"]
    lps: list[float] = choice["logprobs"]["token_logprobs"]
    interval = max(1, interval)
    cuts = [0, *range(1, len(ids), interval)] if ids else [0]
    events = []
    for i, start in enumerate(cuts):
        end = cuts[i + 1] if i + 1 < len(cuts) else len(ids)
        part = ids[start:end]
        last = i == len(cuts) - 1
        chunk_choice: dict[str, Any] = {
            "index": 0,
            "text": "",
            "logprobs": {"tokens": [f"token_id:{t}" for t in part], "token_logprobs": lps[start:end]},
            "finish_reason": choice["finish_reason"] if last else None,
            "token_ids": part,
        }
        if i == 0 and "prompt_token_ids" in choice:
            chunk_choice["prompt_token_ids"] = choice["prompt_token_ids"]
        chunk: dict[str, Any] = {"id": answer.get("id", "cmpl"), "object": "text_completion", "choices": [chunk_choice]}
        if "weight_version" in answer:
            chunk["weight_version"] = answer["weight_version"]
        events.append(b"data: " + msgspec.json.encode(chunk) + b"\n\n")
    return events


def sse_answer(answer: dict[str, Any], interval: int = 1) -> bytes:
    """The whole body of a streamed answer: its events, then ``[DONE]``."""
    return b"".join(completion_events(answer, interval)) + DONE


def join_events(body: bytes) -> dict[str, Any]:
    """A streamed answer's body made one whole answer again (tokens, logprobs and
    the last finish reason joined; the first chunk's other fields kept)."""
    chunks = [msgspec.json.decode(e[6:]) for e in body.split(b"\n\n") if e.startswith(b"data: {")]
    chunks = [c for c in chunks if c.get("choices")]  # not a usage chunk
    answer = chunks[0]
    choice = answer["choices"][0]
    choice["logprobs"]["tokens"] = [t for c in chunks for t in c["choices"][0]["logprobs"]["tokens"]]
    choice["logprobs"]["token_logprobs"] = [x for c in chunks for x in c["choices"][0]["logprobs"]["token_logprobs"]]
    choice["token_ids"] = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    choice["finish_reason"] = chunks[-1]["choices"][0]["finish_reason"]
    return answer
