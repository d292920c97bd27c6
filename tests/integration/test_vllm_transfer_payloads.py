"""The NCCL weight-transfer requests our vLLM adapter sends, parsed by vLLM's own
code.  The transfer itself needs CUDA; what the server does with the request body
first (``parse_init_info`` / ``parse_update_info``: the engine's dataclasses built
from it, unknown keys rejected) does not, so the installed vLLM checks it here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import httpx
import pytest

from backends._vllm import VLLMAdmin
from rstar2_async.testing import FakeVLLM, serve_http

CHECK = """
import json, sys
from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine
init, update = json.loads(sys.stdin.read())
# parse_* are plain methods over the engine's dataclasses (cls(**body)); no CUDA.
engine = NCCLWeightTransferEngine.__new__(NCCLWeightTransferEngine)
i = engine.parse_init_info(init)
u = engine.parse_update_info(update)
# The calls VLLMNcclSender makes (it needs CUDA to run): they exist with these parameters.
import inspect
from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllm.distributed.weight_transfer.nccl_common import trainer_init
assert list(inspect.signature(trainer_init).parameters)[:1] == ["init_info"]
assert list(inspect.signature(PyNcclCommunicator.broadcast).parameters) == ["self", "tensor", "src", "stream"]
assert callable(PyNcclCommunicator.destroy)
print(json.dumps({"rank_offset": i.rank_offset, "world_size": i.world_size, "packed": i.packed, "names": u.names}))
"""


@pytest.mark.anyio
async def test_transfer_requests_parse_in_vllm(vllm_python: Path) -> None:
    fake = FakeVLLM()
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, fake)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http:
            admin = VLLMAdmin(http)
            await admin.init_weight_transfer(master_address="10.0.0.1", master_port=29600, rank_offset=2, world_size=3)
            await admin.receive_weights(["lm_head.weight", "model.norm.weight"], ["bfloat16", "float32"], [[8, 4], [4]])
        tg.cancel_scope.cancel()
    bodies = {r.path: r.body for r in fake.log}
    payload = json.dumps([bodies["/init_weight_transfer_engine"]["init_info"], bodies["/update_weights"]["update_info"]])
    result = subprocess.run(
        [str(vllm_python), "-c", CHECK], input=payload, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed == {"rank_offset": 2, "world_size": 3, "packed": False, "names": ["lm_head.weight", "model.norm.weight"]}
