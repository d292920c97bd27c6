"""The server and tool doubles of benchmarks/paper_scale.py: vLLM doubles behind one
in-process httpx transport (:class:`Doubles`; :class:`SimFleet` generates in the
calibrated time, :class:`GateFleet` when the driver releases it), the model's
script of turns (:class:`Script`), the sandbox double (:class:`SleepSandbox`) and
the bare engine's backend (:class:`BareBackend`).  Their calibration is in
paper_scale.py's docstring."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Final

import anyio
import httpx
import msgspec

from backends import Completion, SamplingParams
from rstar2_async.config import RolloutConfig
from rstar2_async.rollout import Toolbox, problem_messages
from rstar2_async.testing import IM_END, FakeByteTokenizer, sse_answer
from rstar2_async.types import Problem
from sandbox import ExecResult

TURNS: Final = 11
TOOL_S: Final = 0.3
CAPACITY_TOKENS: Final = 1 << 18
GEN_TOKENS: Final = 240
STEP_BASE_S: Final = 2e-3
STEP_PER_SEQ_S: Final = 3e-5
CALL: Final = '<tool_call>{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(6*7)"}}</tool_call>'
TOOL_OUTPUT: Final = "42\n"
MODELS: Final = msgspec.json.encode({"object": "list", "data": [{"id": "m", "max_model_len": 1 << 16}]})


def _completion_body(ids: list[int]) -> bytes:
    """vLLM's answer to a token-id completion (return_token_ids, tokens as ids)."""
    choice = {
        "index": 0,
        "text": "",
        "token_ids": ids,
        "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.25] * len(ids)},
        "finish_reason": "stop",
    }
    return msgspec.json.encode({"id": "cmpl", "object": "text_completion", "choices": [choice]})


class Script:
    """What the model says: ``TURNS - 1`` turns that call the tool, then an answer,
    each padded to GEN_TOKENS.  Every prompt of a turn has the same length, so the
    turn follows from the prompt's length in O(1)."""

    def __init__(self, tokenizer: FakeByteTokenizer, config: RolloutConfig, toolbox: Toolbox) -> None:
        def padded(text: str) -> list[int]:
            ids = tokenizer._encode_text(text, specials=False)
            return tokenizer._encode_text("x" * (GEN_TOKENS - 1 - len(ids)), specials=False) + ids + [IM_END]

        self.call = padded("Let me compute.\n" + CALL)
        self.answer = padded("<answer>\\boxed{42}</answer>")
        self.call_body, self.answer_body = _completion_body(self.call), _completion_body(self.answer)
        problem = Problem(id="0", problem=problem_text(0), answer="42")
        self.prompt_len = len(tokenizer.encode_prompt(problem_messages(problem, config, toolbox)))
        tool_turn = tokenizer.encode_tool_turn([TOOL_OUTPUT.rstrip("\n")])  # as render_exec_result gives it
        self.last_turn_len = self.prompt_len + (TURNS - 1) * (len(self.call) + len(tool_turn))

    def is_last(self, prompt_len: int) -> bool:
        return prompt_len >= self.last_turn_len


def problem_text(i: int) -> str:
    return f"What is 6*7? ({i:06d})"


class _Request(msgspec.Struct):
    prompt: msgspec.Raw
    max_tokens: int
    stream: bool = False
    stream_interval: int = 1


_request: Final = msgspec.json.Decoder(_Request)


class SimServer:
    """One vLLM double's state: what it serves now, as its /metrics reports it."""

    __slots__ = ("capacity", "overflows", "peak", "running", "served", "used")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.running = self.used = self.peak = self.served = self.overflows = 0

    def metrics(self) -> bytes:
        return (
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {float(self.running)}\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {self.used / self.capacity}\n'
            f'vllm:cache_config_info{{block_size="16",kv_cache_size_tokens="{self.capacity}",'
            f'num_gpu_blocks="{self.capacity // 16}"}} 1.0\n'
        ).encode()

    def begin(self, body: bytes) -> tuple[int, int, int | None]:
        """A request starts: its prompt's length, the KV it holds while it runs, and
        the tokens a chunk of its streamed answer (None: answered whole)."""
        request = _request.decode(body)
        prompt = bytes(request.prompt).count(b",") + 1
        tokens = prompt + GEN_TOKENS
        self.running += 1
        self.used += tokens
        if self.used > self.capacity:
            self.overflows += 1
        self.peak = max(self.peak, self.used)
        return prompt, tokens, request.stream_interval if request.stream else None


class Doubles(httpx.AsyncBaseTransport):
    """vLLM doubles behind one httpx transport, told apart by host; ``own_ns`` is
    their own work (the part a real server does), timed apart from ours in CPU
    time (in wall time, a process descheduled halfway through a request on a
    loaded machine counted the wait as the doubles' and took it out of ours)."""

    def __init__(self, servers: int, capacity: int) -> None:
        self.servers = {f"10.0.{i // 256}.{i % 256}": SimServer(capacity) for i in range(servers)}
        self.own_ns = 0
        self._streamed: dict[tuple[bytes, int], bytes] = {}

    @property
    def urls(self) -> list[str]:
        return [f"http://{host}:8000" for host in self.servers]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        t = time.thread_time_ns()
        server = self.servers[request.url.host]
        if request.url.path == "/v1/models":  # asked once per client: the context length
            return httpx.Response(200, content=MODELS)
        if request.url.path == "/metrics":
            response = httpx.Response(200, content=server.metrics())
            self.own_ns += time.thread_time_ns() - t
            return response
        prompt, tokens, interval = server.begin(request.content)
        self.own_ns += time.thread_time_ns() - t
        try:
            answer = await self.generate(server, prompt)
        finally:
            server.running -= 1
            server.used -= tokens
        server.served += 1
        t = time.thread_time_ns()
        if interval is not None:  # streamed as vLLM cuts it, in one body (no sockets here)
            key = (answer, interval)
            if (streamed := self._streamed.get(key)) is None:
                streamed = self._streamed[key] = sse_answer(msgspec.json.decode(answer), interval)
            answer = streamed
        response = httpx.Response(200, content=answer)  # the server writing its answer: its own work too
        self.own_ns += time.thread_time_ns() - t
        return response

    async def generate(self, server: SimServer, prompt: int) -> bytes:
        raise NotImplementedError


class SimFleet(Doubles):
    """Doubles whose generations take the calibrated time (see paper_scale.py's docstring)."""

    def __init__(self, script: Script, servers: int, capacity: int) -> None:
        super().__init__(servers, capacity)
        self.script = script
        self.gen_s = 0.0  # the generations' total time

    async def generate(self, server: SimServer, prompt: int) -> bytes:
        delay = GEN_TOKENS * (STEP_BASE_S + STEP_PER_SEQ_S * server.running)
        self.gen_s += delay
        await asyncio.sleep(delay)
        return self.script.answer_body if self.script.is_last(prompt) else self.script.call_body


class SleepSandbox:
    """A sandbox double: every call takes TOOL_S and prints 42."""

    def __init__(self) -> None:
        self.result = ExecResult("ok", TOOL_OUTPUT, "", 0, TOOL_S)

    async def run(self, code: str, stdin: str = "", timeout: float = 4.0) -> ExecResult:
        await asyncio.sleep(TOOL_S)
        return self.result


class BareBackend:
    """The baseline: the same script and mean generation time, without pool, client or HTTP."""

    def __init__(self, script: Script, gen_s: float) -> None:
        self.script, self.gen_s = script, gen_s
        self.call = Completion(script.call, [-0.25] * len(script.call), "stop")
        self.answer = Completion(script.answer, [-0.25] * len(script.answer), "stop")

    async def generate(
        self, prompt_ids: list[int], *, max_tokens: int, sampling: SamplingParams, session: object = None
    ) -> Completion:
        await asyncio.sleep(self.gen_s)
        return self.answer if self.script.is_last(len(prompt_ids)) else self.call


class GateFleet(Doubles):
    """Doubles whose generations end when the driver releases them."""

    def __init__(self, servers: int, capacity: int) -> None:
        super().__init__(servers, capacity)
        ids = list(range(100, 100 + GEN_TOKENS - 1)) + [IM_END]
        self.body = _completion_body(ids)
        self.running: list[anyio.Event] = []

    async def generate(self, server: SimServer, prompt: int) -> bytes:
        event = anyio.Event()
        self.running.append(event)
        await event.wait()
        return self.body

    def release(self, rng: random.Random) -> None:
        i = rng.randrange(len(self.running))
        self.running[i], self.running[-1] = self.running[-1], self.running[i]
        self.running.pop().set()
