"""SGLang adapter: native ``/generate`` with token ids, admin endpoints, launch command.

SGLang has no CPU build, so nothing here runs against a real server in this
repository's tests; the request shapes are checked against a recording test
double (tests/backends/test_sglang.py).  Shapes follow SGLang's native API:

- ``POST /generate {"input_ids": [...], "sampling_params": {"max_new_tokens",
  "temperature", "top_p", "top_k", "sampling_seed", "skip_special_tokens"},
  "return_logprob": true}`` -> ``{"text", "output_ids", "meta_info":
  {"finish_reason": {"type": "stop"|"length"|"abort", ...},
  "output_token_logprobs": [[logprob, token_id, null], ...], "weight_version"}}``.
  With ``"stream": true`` (read in SGLang's ``http_server.generate_request`` and
  its output processor): ``data: {json}`` server-sent events of that shape, then
  ``data: [DONE]``; ``meta_info.completion_tokens`` counts the tokens so far, and
  ``output_ids`` / ``output_token_logprobs`` hold all of them, or only the new
  ones on a server started with ``--incremental-streaming-output`` (servers the
  fleet launches are: the default makes a turn's stream quadratic in its length),
  a chunk every ``--stream-interval`` tokens (the fleet's: vLLM's per-request
  :data:`backends._vllm_client.STREAM_INTERVAL`; SGLang's default is every token).
  A failure while streaming is a chunk ``{"error": {"message"}}``.
- ``GET /get_server_info`` -> server args plus ``max_total_num_tokens`` (KV capacity
  in tokens); ``GET /get_load`` -> ``[{"num_reqs", "num_waiting_reqs", "num_tokens"}]``
  per data-parallel rank.
- ``POST /pause_generation {"mode": "abort"}``, ``POST /continue_generation``,
  ``POST /flush_cache``, ``POST /update_weights_from_disk {"model_path",
  "weight_version"}``, ``POST /init_weights_update_group {"master_address",
  "master_port", "rank_offset", "world_size", "group_name", "backend"}``,
  ``POST /update_weights_from_distributed {"names", "dtypes", "shapes",
  "group_name", "flush_cache", "weight_version"}``, ``POST /update_weight_version
  {"new_version"}``, ``GET /get_weight_version``.
- Scoring a prompt: ``POST /generate {"input_ids", "sampling_params":
  {"max_new_tokens": 1}, "return_logprob": true, "logprob_start_len": 0}`` ->
  ``meta_info.input_token_logprobs``: ``[[logprob, token_id, null], ...]`` per prompt
  token, the first one's logprob ``null``.

A tied output layer survives ``/update_weights_from_disk``: SGLang's reload
(``ModelRunner.update_weights_from_disk`` -> ``DefaultModelLoader.
load_weights_and_postprocess``) loads every tensor, then runs every layer's
``process_weights_after_loading`` (its tied head is the embedding module itself), so
nothing keeps a processed copy of old weights, unlike vLLM's layer-wise reload
(:mod:`backends._vllm_ext`).  The weight sync's probe checks it all the same.

SGLang has no "finish in-flight requests, then pause" mode; ``native_wait`` is
False, and the weight sync drains the pool's own requests before pausing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, final

import httpx
import msgspec

from ._admin import AdminBase, admin_call, decode_json
from ._dispatch import ServerLoad
from ._errors import BadResponse, ServerUnavailable
from ._protocols import PauseMode
from ._retry import RetryPolicy
from ._progress import Progress
from ._token_client import FINISH_REASONS, CompletionClient, PartReader
from ._token_ids import json_ids
from ._types import Completion, SamplingParams
from ._vllm_client import STREAM_INTERVAL

__all__ = ["SGLangAdmin", "SGLangTokenClient", "sglang_command"]


def sglang_command(
    python: str, model: str, *, host: str, port: int, tensor_parallel_size: int = 1,
    served_model_name: str | None = None, max_model_len: int | None = None, extra_args: Sequence[str] = (),
) -> list[str]:
    """``python -m sglang.launch_server`` with our defaults (GPUs are chosen by
    ``CUDA_VISIBLE_DEVICES``, set by the fleet)."""
    cmd = [
        python, "-m", "sglang.launch_server",
        "--model-path", model,
        "--host", host,
        "--port", str(port),
        "--tp-size", str(tensor_parallel_size),
        "--incremental-streaming-output",  # each streamed chunk holds its new tokens only
        "--stream-interval", str(STREAM_INTERVAL),  # SGLang's is per server: a chunk a token by default
    ]  # fmt: skip
    if served_model_name:
        cmd += ["--served-model-name", served_model_name]
    if max_model_len:
        cmd += ["--context-length", str(max_model_len)]
    return cmd + list(extra_args)


@final
class SGLangAdmin(AdminBase):
    """Admin endpoints of one SGLang server; same surface as :class:`backends.VLLMAdmin`.

    Args:
        http: a client on the server root; lent, not owned.
    """

    engine: Final = "sglang"
    native_wait: Final = False

    async def load(self) -> ServerLoad:
        info = decode_json(await admin_call(self.http, "GET", "/get_server_info"))
        try:
            capacity = int(info["max_total_num_tokens"])
        except (KeyError, TypeError, ValueError) as exc:
            raise BadResponse(f"{self.http.base_url}/get_server_info: no max_total_num_tokens") from exc
        ranks = decode_json(await admin_call(self.http, "GET", "/get_load"))
        ranks = ranks if isinstance(ranks, list) else [ranks]
        return ServerLoad(
            capacity_tokens=capacity,
            used_tokens=sum(int(r.get("num_tokens", 0)) for r in ranks),
            running=sum(int(r.get("num_reqs", 0)) for r in ranks),
            waiting=sum(int(r.get("num_waiting_reqs", 0)) for r in ranks),
        )

    async def pause(self, mode: PauseMode = "abort") -> None:
        """Pause generation, aborting what still runs (``wait`` is the caller's
        drain; see the module docstring).

        Raises:
            ValueError: ``keep``, which this adapter does not drive."""
        if mode == "keep":
            raise ValueError('SGLang: pause mode "keep" is not supported; use "abort" or "wait"')
        await admin_call(self.http, "POST", "/pause_generation", json={"mode": "abort"})

    async def resume(self) -> None:
        await admin_call(self.http, "POST", "/continue_generation", json={})

    async def load_weights_from_disk(self, path: str) -> None:
        body = decode_json(await admin_call(self.http, "POST", "/update_weights_from_disk", json={"model_path": path}))
        _check_success(body, "/update_weights_from_disk")

    async def score(self, model: str, token_ids: Sequence[int]) -> list[float]:
        """``log p(token_ids[i] | token_ids[:i])`` for ``i >= 1`` (``input_token_logprobs``;
        ``model`` is vLLM's need: SGLang serves one).

        Raises:
            BadResponse: the answer lacks a prompt token's log-prob.
        """
        body = {
            "input_ids": list(token_ids), "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_logprob": True, "logprob_start_len": 0,
        }  # fmt: skip
        answer = decode_json(await admin_call(self.http, "POST", "/generate", json=body))
        try:
            rows = answer["meta_info"]["input_token_logprobs"][1:]
            if len(rows) != len(token_ids) - 1:
                raise ValueError(f"{len(rows)} log-probs for {len(token_ids) - 1} tokens")
            return [float(row[0]) for row in rows]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise BadResponse(f"{self.http.base_url}/generate: no input_token_logprobs for the probe: {exc!r}") from exc

    async def reset_prefix_cache(self) -> None:
        await admin_call(self.http, "POST", "/flush_cache")

    async def set_weight_version(self, version: str) -> None:
        await admin_call(self.http, "POST", "/update_weight_version", json={"new_version": version})

    async def weight_version(self) -> str:
        body = decode_json(await admin_call(self.http, "GET", "/get_weight_version"))
        return str(body["weight_version"] if isinstance(body, dict) else body)

    async def init_weight_transfer(
        self, *, master_address: str, master_port: int, rank_offset: int, world_size: int, group_name: str = "weights"
    ) -> None:
        body = {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "group_name": group_name,
            "backend": "nccl",
        }
        _check_success(decode_json(await admin_call(self.http, "POST", "/init_weights_update_group", json=body)), "/init_weights_update_group")

    async def start_weight_update(self) -> None:
        """Nothing to do on SGLang: each distributed update is self-contained."""

    async def receive_weights(
        self, names: Sequence[str], dtypes: Sequence[str], shapes: Sequence[Sequence[int]], *, group_name: str = "weights"
    ) -> None:
        body = {
            "names": list(names),
            "dtypes": list(dtypes),
            "shapes": [list(s) for s in shapes],
            "group_name": group_name,
            "flush_cache": False,
        }
        resp = decode_json(await admin_call(self.http, "POST", "/update_weights_from_distributed", json=body))
        _check_success(resp, "/update_weights_from_distributed")

    async def finish_weight_update(self, version: str) -> None:
        await self.set_weight_version(version)


def _check_success(body: Any, path: str) -> None:
    if isinstance(body, dict) and body.get("success") is False:
        raise ServerUnavailable(f"{path}: {body.get('message', body)}")


class _FinishReason(msgspec.Struct):
    type: str | None = None


class _MetaInfo(msgspec.Struct):
    finish_reason: _FinishReason | None = None
    output_token_logprobs: list[list[Any]] = []
    weight_version: str | None = None
    completion_tokens: int | None = None
    """Tokens generated so far (a streamed chunk's count, whatever its lists hold)."""


class _GenerateResponse(msgspec.Struct):
    meta_info: _MetaInfo = msgspec.field(default_factory=_MetaInfo)
    output_ids: list[int] | None = None
    error: Any = None
    """A streamed answer's failure (``{"message", ...}``)."""


_decoder: Final = msgspec.json.Decoder(_GenerateResponse)
_encoder: Final = msgspec.json.Encoder()


def _decode(content: bytes | memoryview, where: str) -> _GenerateResponse:
    try:
        r = _decoder.decode(content)
    except msgspec.DecodeError as exc:
        raise BadResponse(f"{where}: undecodable: {bytes(content[:200])!r}") from exc
    if r.error is not None:
        raise ServerUnavailable(f"{where}: the server failed the generation: {str(r.error)[:300]}")
    return r


def _tokens(r: _GenerateResponse, where: str, new: int | None = None) -> tuple[list[int], list[float]]:
    """The ids and logprobs of an answer; ``new``: only its last ``new`` of each."""
    entries = r.meta_info.output_token_logprobs
    ids = r.output_ids
    if new is not None:
        entries = entries[len(entries) - new :] if new else []
        ids = None if ids is None else (ids[len(ids) - new :] if new else [])
    try:
        logprobs = [0.0 if e[0] is None else float(e[0]) for e in entries]
        ids = ids if ids is not None else [int(e[1]) for e in entries]
    except (IndexError, TypeError, ValueError) as exc:
        raise BadResponse(f"{where}: malformed output_token_logprobs") from exc
    if len(ids) != len(logprobs):
        raise BadResponse(f"{where}: {len(ids)} ids but {len(logprobs)} logprobs")
    return ids, logprobs


def _version(r: _GenerateResponse) -> int | None:
    v = r.meta_info.weight_version
    return int(v) if v is not None and v.isdigit() else None


@final
class _Reader(PartReader):
    """Streamed chunks: by default each holds every token so far (``output_ids`` and
    ``output_token_logprobs`` whole), with ``--incremental-streaming-output`` only
    the new ones; ``completion_tokens`` counts them all either way, so the new
    tokens are the last ``completion_tokens - seen`` of either."""

    __slots__ = ("seen",)

    def __init__(self, where: str, progress: Progress, sent_version: int) -> None:
        super().__init__(where, progress, sent_version)
        self.seen = 0

    def event(self, payload: memoryview) -> None:
        r = _decode(payload, self.where)
        self.saw_version(_version(r))
        count = r.meta_info.completion_tokens
        new = None if count is None else count - self.seen
        if new is not None and new < 0:
            raise BadResponse(f"{self.where}: completion_tokens went back from {self.seen} to {count}")
        ids, logprobs = _tokens(r, self.where, new)
        self.seen += len(ids)
        self.tokens(ids, logprobs)
        if r.meta_info.finish_reason is not None:
            self.finish = r.meta_info.finish_reason.type


@final
class SGLangTokenClient(CompletionClient):
    """Token ids in and out over SGLang's native ``/generate``; the same
    ``generate`` contract as :class:`backends.TokenClient` (aborts resumed, errors
    translated, retries on connection errors, timeouts and 5xx).

    Args:
        base_url: the server root (``http://host:port``; a trailing ``/v1`` is dropped).
        api_key, timeout, max_connections, retry, transport, stream: as for ``TokenClient``.
    """

    models_path = "/v1/models"  # OpenAI-style cards with max_model_len, beside the native API
    generate_path = "/generate"

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "",
        api_key: str | None = None,
        timeout: httpx.Timeout | None = None,
        max_connections: int = 4096,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        stream: bool = True,
    ) -> None:
        super().__init__(
            base_url.rstrip("/").removesuffix("/v1"), model=model, timeout=timeout,
            headers={"content-type": "application/json"} | ({"authorization": f"Bearer {api_key}"} if api_key else {}),
            max_connections=max_connections, retry=retry, transport=transport, stream=stream,
        )  # fmt: skip

    def _body(self, prompt: Sequence[int], max_tokens: int, sampling: SamplingParams) -> bytes:
        params: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "skip_special_tokens": False,
        }
        if sampling.top_k > 0:
            params["top_k"] = sampling.top_k
        if sampling.seed is not None:
            params["sampling_seed"] = sampling.seed
        body = {"input_ids": json_ids(prompt), "sampling_params": params, "return_logprob": True}
        if self.stream:
            body["stream"] = True
        return _encoder.encode(body)

    def _reader(self, progress: Progress, sent_version: int) -> PartReader:
        return _Reader(self._where, progress, sent_version)

    def _parse(self, content: bytes, sent_version: int) -> Completion:
        r = _decode(content, self._where)
        ids, logprobs = _tokens(r, self._where)
        version = _version(r)
        reason = r.meta_info.finish_reason.type if r.meta_info.finish_reason else None
        return Completion(ids, logprobs, FINISH_REASONS.get(reason, "stop"), sent_version if version is None else version)
