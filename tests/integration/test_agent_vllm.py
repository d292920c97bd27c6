"""The agent loop against a real vLLM server, the real sandbox pool and the real grader.

The tiny model is first fitted to an ideal tool-using conversation (a few seconds
of training), so that greedy decoding really emits a tool call, reads the real
sandbox output and answers.  The test then checks token-in/token-out end to end:
the trajectory's model tokens and logprobs are exactly what the server returned,
tool-response tokens are masked out, and the reward comes from math-verify.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import msgspec
import pytest

from backends import TokenClient
from backends._launcher import VLLMServer
from rstar2_async.config import RolloutConfig, SamplingConfig
from rstar2_async.demo import answer_text, tool_call_text
from rstar2_async.reward import Grader
from rstar2_async.rollout import HFChatTokenizer, RolloutEngine
from rstar2_async.rollout.tools import jupyter, python
from rstar2_async.testing import join_events
from rstar2_async.types import Problem
from sandbox import SandboxConfig, SandboxPool
from tests.integration.conftest import restore_weights

pytestmark = [pytest.mark.vllm]

PROBLEM = Problem(id="mul", problem="What is 6 * 7?", answer="42")
SYSTEM = "Compute with the tool, answer in \\boxed{}."
FIT_WORST_LOSS = 0.02
"""-log p of the least likely token of the fitted conversation, at most."""
CONFIG = RolloutConfig(
    max_turns=3, max_response_tokens=256, system_prompt=SYSTEM, list_tools=False, sampling=SamplingConfig(temperature=0.0)
)


def fit_policy(tiny_model_dir: Path, out: Path, problem: Problem, turns: list[tuple[str, list[str] | None]]) -> Path:
    """The tiny model fitted to one conversation (assistant texts, each followed by its
    tool outputs or by nothing), tokenised exactly as the rollout tokenises it."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    tok = HFChatTokenizer.from_pretrained(tiny_model_dir)
    ids = tok.encode_prompt([{"role": "system", "content": SYSTEM}, {"role": "user", "content": problem.problem}])
    mask = [0] * len(ids)
    for text, outputs in turns:
        generated = tok._encode(text) + [tok.eos_token_id]
        ids, mask = ids + generated, mask + [1] * len(generated)
        if outputs is not None:
            tool = tok.encode_tool_turn(outputs)
            ids, mask = ids + tool, mask + [0] * len(tool)
    x = torch.tensor([ids])
    target_mask = torch.tensor(mask)[1:].bool()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)  # 1e-2 oscillates on this model
    for _ in range(800):
        logits = model(x).logits[0, :-1]  # [T-1, V]
        losses = torch.nn.functional.cross_entropy(logits[target_mask], x[0, 1:][target_mask], reduction="none")
        # Greedy decoding follows the conversation once every token of it has p > 0.98:
        # ~90 steps (a mean loss of 1e-3 took ~550).
        if (worst := losses.max().item()) < FIT_WORST_LOSS:
            break
        opt.zero_grad()
        losses.mean().backward()
        opt.step()
    assert worst < FIT_WORST_LOSS, f"could not fit the conversation: worst token loss {worst}"
    model.save_pretrained(out)
    for f in tiny_model_dir.iterdir():
        if f.name.startswith(("tokenizer", "chat_template")):
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def tool_policy_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Calls the tool, copies its output into the answer."""
    turns = [(tool_call_text(PROBLEM), [PROBLEM.answer]), (answer_text(PROBLEM.answer), None)]
    return fit_policy(tiny_model_dir, tmp_path_factory.mktemp("tool-policy"), PROBLEM, turns)


def call(tool: str, code: str) -> str:
    return "<tool_call>" + json.dumps({"name": tool, "arguments": {"code": code}}) + "</tool_call>"


@pytest.fixture(scope="module")
def two_tool_policy_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Calls the stateless and the notebook Python in one turn, then reads the
    notebook's variable in the next, then answers."""
    turns = [
        (call(python.name, "print(6 * 7)") + call(jupyter.name, "x = 6 * 7"), ["42", "(no output)"]),
        (call(jupyter.name, "print(x)"), ["42"]),
        (answer_text("42"), None),
    ]
    return fit_policy(tiny_model_dir, tmp_path_factory.mktemp("two-tool-policy"), PROBLEM, turns)


class Recorder(httpx.AsyncBaseTransport):
    """Passes requests to a real transport and keeps every completion the server sent."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.completions: list[dict] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        if request.url.path.endswith("/completions"):  # streamed: its chunks joined
            answer = join_events(body) if body.startswith(b"data:") else json.loads(body)
            self.completions.append(answer["choices"][0])
        return httpx.Response(response.status_code, headers=response.headers, content=body)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def policy_server(vllm_server: VLLMServer, tool_policy_dir: Path, tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    restore_weights(vllm_server, tool_policy_dir, "tool-policy")
    yield vllm_server
    restore_weights(vllm_server, tiny_model_dir, "default")


@pytest.mark.anyio
async def test_tool_using_trajectories_are_token_exact(policy_server: VLLMServer, tool_policy_dir: Path) -> None:
    from transformers import AutoTokenizer

    recorder = Recorder()
    tok, hf = HFChatTokenizer.from_pretrained(tool_policy_dir), AutoTokenizer.from_pretrained(str(tool_policy_dir))
    async with (
        TokenClient(policy_server.base_url + "/v1", model=policy_server.model, transport=recorder) as client,
        SandboxPool(SandboxConfig(workers=1)) as sandbox,
        Grader(workers=1) as grader,
    ):
        engine = RolloutEngine(backend=client, sandbox=sandbox, config=CONFIG, tokenizer=tok, reward=grader)
        [group] = await engine.run([PROBLEM], n=2)

    # Trajectories run concurrently: match each turn to a served completion by content.
    served = [(c["token_ids"], c["logprobs"]["token_logprobs"]) for c in recorder.completions]
    assert len(served) == sum(t.num_turns for t in group.trajectories)
    for t in group.trajectories:
        assert t.finish_reason == "answer", t.response_text
        assert t.num_turns == 2 and t.num_tool_calls == 1 and t.num_tool_errors == 0
        result = t.turns[0].tool_results[0]
        assert result.status == "ok" and result.output == "42" and result.call is not None
        assert t.reward == 1.0
        assert "\\boxed{42}" in tok.decode(t.response_ids)
        assert t.response_text == tok.decode(t.response_ids)  # built from pieces, equal to one decode
        for turn in t.turns:
            span = slice(turn.start, turn.start + turn.num_generated)
            # exactly the server's tokens and sampling logprobs, never re-tokenised
            served.remove((t.response_ids[span], t.logprobs[span]))
            assert set(t.loss_mask[span]) == {1}
            appended = slice(span.stop, span.stop + turn.num_appended)
            assert set(t.loss_mask[appended]) <= {0} and set(t.logprobs[appended]) <= {0.0}
        assert len(t.response_ids) == len(t.loss_mask) == len(t.logprobs)
        # The ids equal transformers' rendering of the whole conversation, tokenised.
        conversation = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROBLEM.problem}]
        for turn in t.turns:
            text = tok.decode(t.response_ids[turn.start:turn.start + turn.num_generated]).removesuffix(tok.eos_text)
            conversation += [{"role": "assistant", "content": text}, *({"role": "tool", "content": r.output} for r in turn.tool_results)]
        whole = hf.apply_chat_template(conversation, tokenize=False)
        assert t.prompt_ids + t.response_ids + hf("\n", add_special_tokens=False)["input_ids"] == hf(whole, add_special_tokens=False)["input_ids"]
    assert served == []


@pytest.mark.anyio
async def test_a_trajectory_uses_both_tools_and_the_notebook_keeps_its_state(
    vllm_server: VLLMServer, two_tool_policy_dir: Path, tiny_model_dir: Path
) -> None:
    restore_weights(vllm_server, two_tool_policy_dir, "two-tool-policy")
    try:
        tok = HFChatTokenizer.from_pretrained(two_tool_policy_dir)
        config = msgspec.structs.replace(CONFIG, max_turns=4, tools=[f"rstar2_async.rollout.tools:{n}" for n in ("python", "jupyter")])
        async with (
            TokenClient(vllm_server.base_url + "/v1", model=vllm_server.model) as client,
            SandboxPool(SandboxConfig(workers=2)) as sandbox,
            Grader(workers=1) as grader,
        ):
            engine = RolloutEngine(backend=client, sandbox=sandbox, config=config, tokenizer=tok, reward=grader)
            [group] = await engine.run([PROBLEM], n=1)
    finally:
        restore_weights(vllm_server, tiny_model_dir, "default")
    [t] = group.trajectories
    assert t.finish_reason == "answer" and t.reward == 1.0, t.response_text
    first, second, _ = t.turns
    assert [(r.call.name, r.status, r.output) for r in first.tool_results] == [  # type: ignore[union-attr]
        (python.name, "ok", "42"), (jupyter.name, "ok", "(no output)"),
    ]
    # The notebook's second call sees the variable its first call defined.
    assert [(r.call.name, r.status, r.output) for r in second.tool_results] == [(jupyter.name, "ok", "42")]  # type: ignore[union-attr]
