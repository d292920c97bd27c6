"""Test doubles at the edges of the rollout core: a byte-level ChatML tokenizer, a
scripted "model" served over real HTTP as an OpenAI completions endpoint, and an
in-process sandbox.  Each has a real counterpart tested in tests/integration.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import msgspec

from rstar2_async.types import Problem
from sandbox import ExecResult

from ._http import DropConnection
from ._sse import sse_answer

IM_START, IM_END = 256, 257
_SPECIAL = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}
_SPECIAL_RE = re.compile("(<\\|im_start\\|>|<\\|im_end\\|>)")
# What surrounds a tool turn's results in CHATML_TEMPLATE (HFChatTokenizer's frame).
_TOOL_TURN_OPEN = (10, IM_START, *b"user")
_TOOL_TURN_CLOSE = (IM_END, 10, IM_START, *b"assistant\n")


CHATML_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] != 'tool' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% else %}{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ m['content'] }}\n</tool_response>"  # a newline after a block tag would be trimmed
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML whose consecutive ``tool`` messages form one user turn of ``<tool_response>``
blocks, as Qwen2.5's template (and the demo model's) renders them."""


def write_byte_tokenizer(out: Path) -> Path:
    """:class:`FakeByteTokenizer` as a Hugging Face tokenizer directory, for code
    that loads one by path (a rollout shard's worker): byte-level BPE without merges
    whose ids are the bytes, the two ChatML specials, and :data:`CHATML_TEMPLATE`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    # GPT-2's byte -> character table, which the ByteLevel pre-tokenizer applies.
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    chars = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}
    tok = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(_SPECIAL[i], special=True, normalized=False) for i in (IM_START, IM_END)])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"eos_token": _SPECIAL[IM_END], "chat_template": CHATML_TEMPLATE}))
    return out


class FakeByteTokenizer:
    """Test double of :class:`rstar2_async.rollout.HFChatTokenizer`: UTF-8 bytes are
    ids 0-255, ``<|im_start|>``/``<|im_end|>`` are 256/257, :data:`CHATML_TEMPLATE`
    (a turn's tool results in one user turn, each in ``<tool_response>``)."""

    eos_token_id = IM_END
    eos_text = "<|im_end|>"

    def _encode_text(self, text: str, *, specials: bool = True) -> list[int]:
        if not specials or "<|im_" not in text:  # no special token: the bytes are the ids
            return list(text.encode())
        ids: list[int] = []
        for part in _SPECIAL_RE.split(text):
            if part == "<|im_start|>":
                ids.append(IM_START)
            elif part == "<|im_end|>":
                ids.append(IM_END)
            else:
                ids += part.encode()
        return ids

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return self._encode_text(text + "<|im_start|>assistant\n")

    def encode_tool_turn(self, outputs: Sequence[str]) -> list[int]:
        return [*_TOOL_TURN_OPEN, *_results(outputs).encode(), *_TOOL_TURN_CLOSE]

    def tool_turn_text(self, outputs: Sequence[str]) -> str:
        return f"\n<|im_start|>user{_results(outputs)}<|im_end|>\n<|im_start|>assistant\n"

    def decode(self, ids: Sequence[int]) -> str:
        # The benchmarks use this double too and must not measure it, so the work
        # stays in C: bytes() converts a run without specials (and refuses ids
        # >= 256), list.index finds the specials.
        try:
            return bytes(ids).decode(errors="replace")
        except ValueError:
            pass
        ids = list(ids)
        cuts = sorted(p for s in _SPECIAL for p in _positions(ids, s))
        out, start = [], 0
        for pos in cuts:
            out += [bytes(ids[start:pos]).decode(errors="replace"), _SPECIAL[ids[pos]]]
            start = pos + 1
        out.append(bytes(ids[start:]).decode(errors="replace"))
        return "".join(out)


def _results(outputs: Sequence[str]) -> str:
    return "".join(f"\n<tool_response>\n{out}\n</tool_response>" for out in outputs)


def _positions(ids: list[int], value: int) -> list[int]:
    found, pos = [], -1
    while True:
        try:
            pos = ids.index(value, pos + 1)
        except ValueError:
            return found
        found.append(pos)


def last_user_message(conversation: str) -> str:
    return conversation.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0]


def arithmetic_policy(conversation: str) -> str:
    """A scripted solver: asks the tool to compute ``a*b`` from "What is a*b?", then
    copies the tool's answer into ``\\boxed{}``."""
    last = last_user_message(conversation)
    if "<tool_response>" in last:
        value = last.split("<tool_response>\n", 1)[1].split("\n", 1)[0]
        return f"The tool says {value}.\n<answer>\\boxed{{{value}}}</answer>"
    expr = re.search(r"What is (\d+\*\d+)\?", last)
    assert expr, last
    call = {"name": "execute_python_code_with_standard_io", "arguments": {"code": f"print({expr.group(1)})"}}
    return f"Let me compute.\n<tool_call>{json.dumps(call)}</tool_call>"


def _chat_prompt(messages: list[dict[str, str]]) -> str:
    """A chat as the fake's template renders it, up to the assistant's turn."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


@dataclass
class FakeModelServer:
    """An OpenAI ``/v1/completions`` endpoint (vLLM's token-id dialect) whose
    "model" is a Python function of the decoded conversation.

    Misbehaviour knobs: ``delay_s`` per request, ``fail_first`` requests answered 503,
    ``drop_first`` connections closed without an answer, ``abort_every`` (every k-th
    request returns half its tokens with ``finish_reason: "abort"``), ``garbage_first``
    requests answered with bytes that are not JSON.

    A request with ``"stream": true`` is answered as vLLM streams it (server-sent
    events of ``stream_interval`` tokens, then ``[DONE]``), in one body.

    ``GET /v1/models`` and ``POST /tokenize`` are answered before the knobs and not
    recorded in ``requests``: 404, or with ``max_model_len`` set, a model card that
    reports it and the count of a chat's prompt (one token a byte); a request whose
    prompt + ``max_tokens`` exceeds it is then refused with a 400, as vLLM does.
    """

    policy: Callable[[str], str] = arithmetic_policy
    tokenizer: FakeByteTokenizer = field(default_factory=FakeByteTokenizer)
    delay_s: float = 0.0
    fail_first: int = 0
    drop_first: int = 0
    abort_every: int = 0
    garbage_first: int = 0
    weight_version: int | None = None
    max_model_len: int | None = None
    requests: list[dict] = field(default_factory=list)

    async def __call__(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if path in ("/v1/models", "/tokenize"):
            if self.max_model_len is None:
                return 404, b'{"error": "not found"}'
            if path == "/tokenize":
                return 200, msgspec.json.encode({"count": len(_chat_prompt(json.loads(body)["messages"]))})
            card = {"id": "m", "object": "model", "max_model_len": self.max_model_len}
            return 200, msgspec.json.encode({"object": "list", "data": [card]})
        n = len(self.requests)
        request = json.loads(body) if body else {}
        self.requests.append(request)
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        if n < self.drop_first:
            raise DropConnection
        if n < self.fail_first:
            return 503, b'{"error": "overloaded"}'
        if n < self.garbage_first:
            return 200, b"\x00\xffnot json"
        if path == "/v1/chat/completions":
            prompt_tokens = len(_chat_prompt(request["messages"]))
            if self.max_model_len is not None and prompt_tokens + request["max_tokens"] > self.max_model_len:
                return 400, self._too_long(request["max_tokens"], prompt_tokens)
            return 200, self._chat(request, n)
        if path != "/v1/completions":
            return 404, b'{"error": "not found"}'
        prompt: list[int] = request["prompt"]
        if self.max_model_len is not None and len(prompt) + request["max_tokens"] > self.max_model_len:
            return 400, self._too_long(request["max_tokens"], len(prompt))
        text = self.policy(self.tokenizer.decode(prompt))
        # A resumed request already holds the start of the answer: continue it.
        done = self.tokenizer.decode(prompt).rsplit("<|im_start|>assistant\n", 1)[-1]
        ids = self.tokenizer._encode_text(text, specials=False)[len(done.encode()):] + [IM_END]
        finish = "stop"
        if len(ids) > request["max_tokens"]:
            ids, finish = ids[: request["max_tokens"]], "length"
        if self.abort_every and n % self.abort_every == self.abort_every - 1 and len(ids) > 1:
            ids, finish = ids[: len(ids) // 2], "abort"
        choice = {
            "index": 0,
            "text": self.tokenizer.decode(ids),
            "token_ids": ids,
            "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.25] * len(ids)},
            "finish_reason": finish,
        }
        payload: dict = {"id": f"cmpl-{n}", "object": "text_completion", "choices": [choice]}
        if self.weight_version is not None:
            payload["weight_version"] = self.weight_version
        if request.get("stream"):
            return 200, sse_answer(payload, request.get("stream_interval", 1))
        return 200, msgspec.json.encode(payload)

    def _too_long(self, max_tokens: int, prompt_tokens: int) -> bytes:
        message = f"max_tokens={max_tokens} is too large: the prompt has {prompt_tokens} tokens of {self.max_model_len}"
        return msgspec.json.encode({"error": {"message": message, "code": 400}})

    def _chat(self, request: dict, n: int) -> bytes:
        """The same policy behind the chat API (text in, text out)."""
        conversation = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in request["messages"])
        text, finish, limit = self.policy(_chat_prompt(request["messages"])), "stop", request.get("max_tokens")
        if limit is not None and len(text.encode()) + 1 > limit:  # one token a byte, and the end token
            text, finish = text.encode()[:limit].decode(errors="ignore"), "length"
        message = {"role": "assistant", "content": text}
        generated = len(text.encode()) + (finish == "stop")
        usage = {"prompt_tokens": len(conversation), "completion_tokens": generated, "total_tokens": 0}
        payload = {
            "id": f"chat-{n}", "object": "chat.completion", "created": 0, "model": request["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage,
        }
        return msgspec.json.encode(payload)


class FakeSandbox:
    """Test double of :class:`sandbox.SandboxPool`: runs code with ``exec`` in a
    worker thread, no isolation.  Only for trusted test snippets."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def run(self, code: str, stdin: str = "", timeout: float = 4.0) -> ExecResult:
        self.calls.append(code)
        start = time.monotonic()
        return await anyio.to_thread.run_sync(self._run, code, stdin, start)

    @staticmethod
    def _run(code: str, stdin: str, start: float) -> ExecResult:
        out, err = io.StringIO(), io.StringIO()
        status, exit_code = "ok", 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                exec(compile(code, "<tool>", "exec"), {"__name__": "__main__"})
            except SystemExit as exc:
                exit_code = exc.code if isinstance(exc.code, int) else 1
                status = "ok" if exit_code == 0 else "error"
            except BaseException as exc:  # noqa: BLE001 - the code's failure is a result
                print(f"{type(exc).__name__}: {exc}", file=err)
                status, exit_code = "error", 1
        return ExecResult(status, out.getvalue(), err.getvalue(), exit_code, time.monotonic() - start)


class FakeExactReward:
    """Test double of the math grader: exact match on the boxed gold answer."""

    async def reward(self, response_text: str, problem: Problem) -> float:
        return float(f"\\boxed{{{problem.answer}}}" in response_text)
