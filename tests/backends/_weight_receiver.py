"""A stand-in for a vLLM server's weight receiver: speaks vLLM's HTTP choreography
(``/init_weight_transfer_engine``, ``/start_weight_update``, ``/update_weights``,
``/finish_weight_update``, ``/pause``, ``/resume``, ``/metrics``...) and receives
the broadcast tensors over a gloo group, as vLLM's worker does over NCCL.

Like vLLM, it holds the weights in its own memory: each tensor that arrives
(broadcast, or read from a safetensors directory by ``reload_weights``) lands in
the receiver's parameter of that name, allocated on first sight.  The disk path
reads each tensor's bytes straight into its parameter (``readinto``: one copy
from the page cache, no mapping); ``safetensors.load_file`` alone would not do,
as it maps the file and reads nothing until a tensor is touched.

Run: ``python _weight_receiver.py PORT``.  ``GET /received`` returns what arrived
last: ``{name: {"dtype", "shape", "values", "sha256"}}`` (values only for small
tensors; the SHA-256 of the tensor's bytes for every one).
"""

import hashlib
import json
import struct
import sys
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.distributed as dist

state = {"group": None, "received": {}, "version": "default", "paused": False}
params: dict[str, torch.Tensor] = {}
"""The receiver's "model": one tensor per name, reused across updates."""
lock = threading.Lock()


def param(name, dtype, shape):
    """The parameter ``name``, (re)allocated if it has no matching buffer yet."""
    t = params.get(name)
    if t is None or t.dtype != dtype or list(t.shape) != list(shape):
        t = params[name] = torch.empty(shape, dtype=dtype)
    return t


SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def read_safetensors(path):
    """Read every tensor of one safetensors file into its parameter; return the names."""
    with open(path, "rb", buffering=0) as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        base = 8 + n
        for name, meta in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            begin, end = meta["data_offsets"]
            t = param(name, SAFETENSORS_DTYPES[meta["dtype"]], meta["shape"])
            view = memoryview(t.reshape(-1).view(torch.uint8).numpy())
            assert len(view) == end - begin, f"{name}: {end - begin} bytes for {len(view)}"
            f.seek(base + begin)
            done = 0
            while done < len(view):
                got = f.readinto(view[done:])
                if not got:
                    raise EOFError(f"{path}: truncated in {name}")
                done += got
            record(name, t)


def record(name, t):
    state["received"][name] = t  # described when asked: the benchmark times the receiving, not hashing


def describe(t):
    return {
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "values": t.flatten().tolist() if t.numel() <= 4096 else [],
        "sha256": hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy()).hexdigest(),
    }


class Handler(BaseHTTPRequestHandler):
    def _send(self, code, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/metrics":
            text = ('vllm:num_requests_running{engine="0"} 0.0\nvllm:kv_cache_usage_perc{engine="0"} 0.0\n'
                    'vllm:cache_config_info{kv_cache_size_tokens="1024"} 1.0\n')
            return self._send(200, text.encode())
        if self.path == "/weight_info":
            return self._send(200, {"weight_version": state["version"]})
        if self.path == "/received":
            return self._send(200, {name: describe(t) for name, t in state["received"].items()})
        return self._send(200, {})

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length)) if length else {}
        path = self.path.split("?")[0]
        if path == "/init_weight_transfer_engine":
            info = body["init_info"]
            timeout = timedelta(seconds=60)
            store = dist.TCPStore(info["master_address"], info["master_port"], info["world_size"], is_master=False, timeout=timeout)
            state["group"] = dist.ProcessGroupGloo(store, info["rank_offset"], info["world_size"], timeout)
            return self._send(200, {"message": "Weight transfer initialized"})
        if path == "/update_weights":
            info = body["update_info"]
            opts = dist.BroadcastOptions()
            opts.rootRank = 0
            for name, dtype, shape in zip(info["names"], info["dtype_names"], info["shapes"]):
                t = param(name, getattr(torch, dtype), shape)
                state["group"].broadcast([t], opts).wait()
                record(name, t)
            return self._send(200, {"message": "Weights updated"})
        if path == "/collective_rpc":  # rstar2_reload_weights from a safetensors directory
            import glob

            files = sorted(glob.glob(body["kwargs"]["weights_path"] + "/*.safetensors"))
            for f in files:
                read_safetensors(f)
            return self._send(200, {"results": [{"read": len(files), "unloaded": [], "unconsumed": [], "retied": []}]})
        if path == "/finish_weight_update":
            state["version"] = body.get("weight_version") or state["version"]
            return self._send(200, {"message": "Weight update finished"})
        if path == "/update_weight_version":
            state["version"] = body["new_version"]
            return self._send(200, {"success": True, "new_version": state["version"]})
        if path == "/pause":
            state["paused"] = True
            return self._send(200, {"status": "paused"})
        if path == "/resume":
            state["paused"] = False
            return self._send(200, {"status": "resumed"})
        return self._send(200, {})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
