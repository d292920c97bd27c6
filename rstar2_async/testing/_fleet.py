"""Test doubles of vLLM and SGLang servers for the pool, the adapters and the weight
sync: each records every request (method, path, query, JSON body) and answers
with the shapes the real engines use (measured for vLLM, documented for SGLang).

``FakeVLLM`` generates with a :class:`FakeModelServer`; knobs:
``dead`` (drop every connection), ``hang`` (never answer completions),
:meth:`FakeVLLM.stop` / :meth:`FakeVLLM.cont` (a SIGSTOPped process: every request
waits, admin and polls included, until ``cont``),
``fail_paths`` (paths answered 500), ``load_s`` (a reload's time), ``capacity_tokens`` / ``used_tokens``
(reported in ``/metrics``).  While paused, completions wait for ``/resume``; a
completion that a ``/pause?mode=abort`` overlapped answers the first half of its
tokens with ``finish_reason: "abort"`` (vLLM ends it at once; the double when its
model answers); one that a ``/pause?mode=keep`` overlapped answers whole, after
``/resume`` (vLLM freezes it meanwhile).  Once versioned, completions carry the
version they started on (``weight_version``), as vLLM's ``/inference/v1/generate``
does; ``stamps_versions=False`` answers without one, as its ``/v1/completions`` does.

Weight reloads go through rstar2's worker extension (``rstar2_reload_weights``, which
answers a load report; ``extension=False`` answers vLLM's 500 for a method the workers
lack), and a completion asking for ``prompt_logprobs`` scores its prompt with
:func:`fake_logprobs` of the weights the double holds (``weights``, the last directory
loaded): a probe tells one directory from another, as it does on a real server.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

import anyio
import msgspec

from backends import SyncReport

from ._http import DropConnection
from ._model import FakeModelServer
from ._sse import join_events, sse_answer


def fake_logprobs(weights: str, token_ids: Sequence[int]) -> list[float]:
    """What a :class:`FakeVLLM` holding ``weights`` answers as the prompt log-probs of
    ``token_ids`` (one per token after the first): a pure function of both."""
    salt = int(hashlib.sha256(weights.encode()).hexdigest()[:8], 16)
    return [-((salt + 7919 * t + i) % 1000) / 100 for i, t in enumerate(token_ids[1:])]


def sync_report(version: int) -> SyncReport:
    """What a test double of :class:`backends.WeightSync` returns: ``version`` on
    server 0, unverified, in no time."""
    return SyncReport(version=version, transport="disk", servers=[0], retried=[], removed=[], pause_s=0.0, load_s=0.0,
                      flush_s=0.0, version_s=0.0, resume_s=0.0, total_s=0.0)  # fmt: skip


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: object


@dataclass
class FakeVLLM:
    scripted: FakeModelServer = field(default_factory=FakeModelServer)
    capacity_tokens: int = 131072
    used_tokens: int = 0
    dead: bool = False
    hang: bool = False
    fail_paths: set[str] = field(default_factory=set)
    version: str = "default"
    weights: str = "initial"
    log: list[Recorded] = field(default_factory=list)
    running: int = 0
    aborted: int = 0
    """Completions cut short by an abort-mode pause."""
    stamps_versions: bool = True
    extension: bool = True
    """Whether the workers have rstar2's reload extension."""
    unloaded: list[str] = field(default_factory=list)
    """Parameters the next reloads report as not loaded."""
    loads: str | None = None
    """The directory every reload loads, whatever it is asked (a server handed the
    wrong directory); None: the one asked."""
    load_s: float = 0.0
    """How long ``/collective_rpc`` (a reload) takes."""

    def __post_init__(self) -> None:
        self._resumed = anyio.Event()
        self._resumed.set()
        self._continued = anyio.Event()  # cleared while stopped
        self._continued.set()
        self._abort_pauses = 0
        self._pause_mode = ""

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def stop(self) -> None:
        """As SIGSTOP: requests from now on wait (unanswered) until :meth:`cont`."""
        if self._continued.is_set():
            self._continued = anyio.Event()

    def cont(self) -> None:
        self._continued.set()

    def paths(self) -> list[str]:
        return [r.path for r in self.log if r.path not in ("/metrics", "/health", "/v1/completions", "/v1/models")]

    async def __call__(self, method: str, target: str, body: bytes) -> tuple[int, bytes]:
        await self._continued.wait()
        if self.dead:
            raise DropConnection
        url = urlsplit(target)
        path, query = url.path, dict(parse_qsl(url.query))
        parsed = json.loads(body) if body else None
        self.log.append(Recorded(method, path, query, parsed))
        if path in self.fail_paths:
            return 500, b'{"error": "injected failure"}'
        if path == "/v1/models":
            return await self.scripted(method, path, body)
        if path == "/v1/completions" and isinstance(parsed, dict) and "prompt_logprobs" in parsed:
            await self._resumed.wait()
            ids = parsed["prompt"]
            rows = [None] + [{str(t): {"logprob": lp, "rank": 1}} for t, lp in zip(ids[1:], fake_logprobs(self.weights, ids))]
            return 200, msgspec.json.encode({"choices": [{"prompt_logprobs": rows, "token_ids": [0]}]})
        if path == "/v1/completions":
            if self.hang:
                await anyio.sleep_forever()
            await self._resumed.wait()
            self.running += 1
            pauses, version = self._abort_pauses, self.version
            try:
                status, payload = await self.scripted(method, path, body)
            finally:
                self.running -= 1
            await self._continued.wait()  # stopped while generating: no answer until continued
            if self.dead:  # killed while generating
                raise DropConnection
            if self.paused and self._pause_mode == "keep":  # frozen until the resume
                await self._resumed.wait()
            if status != 200 or (version == "default" and pauses == self._abort_pauses):
                return status, payload
            return status, self._stamp(payload, version, aborted=pauses != self._abort_pauses, stream=isinstance(parsed, dict) and bool(parsed.get("stream")))
        if path == "/collective_rpc" and self.load_s:  # a reload takes its time; stopped meanwhile, it waits
            await anyio.sleep(self.load_s)
            await self._continued.wait()
        return self.admin(path, query, parsed)

    def admin(self, path: str, query: dict[str, str], body: object) -> tuple[int, bytes]:
        ok = b"{}"
        match path:
            case "/health":
                return 200, b""
            case "/metrics":
                fraction = self.used_tokens / self.capacity_tokens
                text = (
                    f'vllm:num_requests_running{{engine="0",model_name="m"}} {float(self.running)}\n'
                    'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
                    f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {fraction}\n'
                    f'vllm:cache_config_info{{block_size="128",kv_cache_size_tokens="{self.capacity_tokens}",'
                    f'num_gpu_blocks="{self.capacity_tokens // 128}"}} 1.0\n'
                )
                return 200, text.encode()
            case "/pause":
                self._resumed = anyio.Event()
                self._abort_pauses += query.get("mode") == "abort"
                self._pause_mode = query.get("mode", "")
                return 200, b'{"status": "paused"}'
            case "/resume":
                self._resumed.set()
                return 200, b'{"status": "resumed"}'
            case "/is_paused":
                return 200, json.dumps({"is_paused": self.paused}).encode()
            case "/collective_rpc":
                assert isinstance(body, dict)
                if body["method"] != "rstar2_reload_weights" or not self.extension:
                    error = f"Worker failed with error ''CPUWorker' object has no attribute '{body['method']}''"
                    return 500, msgspec.json.encode({"error": {"message": error, "code": 500}})
                self.weights = self.loads or body["kwargs"]["weights_path"]
                report = {"read": 1, "unloaded": self.unloaded, "unconsumed": [], "retied": []}
                return 200, msgspec.json.encode({"results": [report]})
            case "/reset_prefix_cache":
                return 200, b'{"success": true}'
            case "/update_weight_version":
                assert isinstance(body, dict)
                self.version = body["new_version"]
                return 200, msgspec.json.encode({"success": True, "new_version": self.version})
            case "/weight_info":
                return 200, msgspec.json.encode({"weight_version": self.version})
            case "/finish_weight_update":
                assert isinstance(body, dict)
                self.version = body["weight_version"]
                return 200, ok
            case "/init_weight_transfer_engine" | "/start_weight_update" | "/update_weights":
                return 200, ok
        return 404, b'{"error": "not found"}'

    def _stamp(self, payload: bytes, version: str, *, aborted: bool, stream: bool) -> bytes:
        answer = join_events(payload) if stream else json.loads(payload)
        if version != "default" and self.stamps_versions:
            answer["weight_version"] = version
        if aborted:
            self.aborted += 1
            choice = answer["choices"][0]
            keep = len(choice["token_ids"]) // 2
            choice["token_ids"] = choice["token_ids"][:keep]
            choice["logprobs"] = {k: v[:keep] for k, v in choice["logprobs"].items()}
            choice["text"], choice["finish_reason"] = self.scripted.tokenizer.decode(choice["token_ids"]), "abort"
        return sse_answer(answer) if stream else msgspec.json.encode(answer)


@dataclass
class FakeSGLang:
    """Records requests; answers SGLang's native shapes."""

    capacity_tokens: int = 200000
    used_tokens: int = 1000
    log: list[Recorded] = field(default_factory=list)
    version: str = "0"
    incremental: bool = False
    """Streamed chunks hold only their new tokens (a server started with
    ``--incremental-streaming-output``); else every token so far."""

    async def __call__(self, method: str, target: str, body: bytes) -> tuple[int, bytes]:
        url = urlsplit(target)
        parsed = json.loads(body) if body else None
        self.log.append(Recorded(method, url.path, dict(parse_qsl(url.query)), parsed))
        match url.path:
            case "/health":
                return 200, b""
            case "/get_server_info":
                return 200, msgspec.json.encode({"max_total_num_tokens": self.capacity_tokens, "tp_size": 1})
            case "/get_load":
                return 200, msgspec.json.encode([{"dp_rank": 0, "num_reqs": 2, "num_waiting_reqs": 1, "num_tokens": self.used_tokens}])
            case "/generate":
                assert isinstance(parsed, dict)
                n = min(3, parsed["sampling_params"]["max_new_tokens"])
                ids = [7 + i for i in range(n)]
                finish = {"type": "length" if n == parsed["sampling_params"]["max_new_tokens"] else "stop"}
                if parsed.get("stream"):
                    return 200, self._stream(ids, finish)
                meta = {
                    "finish_reason": finish,
                    "output_token_logprobs": [[-0.5, t, None] for t in ids],
                    "weight_version": self.version,
                }
                return 200, msgspec.json.encode({"text": "abc"[:n], "output_ids": ids, "meta_info": meta})
            case "/update_weight_version":
                assert isinstance(parsed, dict)
                self.version = parsed["new_version"]
                return 200, b'{"success": true}'
            case "/get_weight_version":
                return 200, msgspec.json.encode({"weight_version": self.version})
        return 200, b'{"success": true, "message": "ok"}'

    def _stream(self, ids: list[int], finish: dict) -> bytes:
        """One chunk a token, each holding every token so far (SGLang's default) or,
        ``incremental``, only its own (``--incremental-streaming-output``)."""
        events = []
        for i in range(len(ids)):
            held = ids[i : i + 1] if self.incremental else ids[: i + 1]
            meta = {
                "finish_reason": finish if i == len(ids) - 1 else None,
                "output_token_logprobs": [[-0.5, t, None] for t in held],
                "completion_tokens": i + 1,
                "weight_version": self.version,
            }
            events.append(b"data: " + msgspec.json.encode({"text": "", "output_ids": held, "meta_info": meta}) + b"\n\n")
        return b"".join(events) + b"data: [DONE]\n\n"
