"""A stand-in for a vLLM server's weight receiver: speaks vLLM's HTTP choreography
(``/init_weight_transfer_engine``, ``/start_weight_update``, ``/update_weights``,
``/finish_weight_update``, ``/pause``, ``/resume``, ``/metrics``...) and receives
the broadcast tensors over a gloo group, as vLLM's worker does over NCCL.

Run: ``python _weight_receiver.py PORT``.  ``GET /received`` returns what arrived:
``{name: {"dtype", "shape", "values"}}``.
"""

import json
import sys
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.distributed as dist

state = {"group": None, "received": {}, "version": "default", "paused": False}
lock = threading.Lock()


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
            return self._send(200, state["received"])
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
                t = torch.empty(shape, dtype=getattr(torch, dtype))
                state["group"].broadcast([t], opts).wait()
                small = t.numel() <= 4096
                state["received"][name] = {"dtype": dtype, "shape": shape, "values": t.flatten().tolist() if small else []}
            return self._send(200, {"message": "Weights updated"})
        if path == "/collective_rpc":  # reload_weights from a safetensors directory
            import glob
            from safetensors.torch import load_file
            for f in sorted(glob.glob(body["kwargs"]["weights_path"] + "/*.safetensors")):
                for name, t in load_file(f).items():
                    state["received"][name] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "values": []}
            return self._send(200, {"results": [None]})
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
