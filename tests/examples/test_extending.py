"""The examples of docs/extending.md, run: a tool, a reward and an engine of a user's,
through the real rollout engine, sandbox and grader.  The guide shows each file whole;
this checks that what it shows is what runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rstar2_async.config import RolloutConfig
from rstar2_async.demo import cached_tiny_model
from rstar2_async.reward import Grader
from rstar2_async.rollout import RolloutEngine, ToolContext, load_tools
from rstar2_async.testing import FakeSandbox
from rstar2_async.types import Problem
from sandbox import SandboxConfig, SandboxPool

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "extending.md"


def test_the_guide_shows_each_example_file_as_it_is() -> None:
    blocks = re.findall(r"```python\n# (examples/\w+\.py)\n(.*?)```", GUIDE.read_text(), re.S)
    assert {name for name, _ in blocks} == {"examples/calculator_tool.py", "examples/concise_reward.py", "examples/scripted_engine.py"}
    for name, body in blocks:
        assert (ROOT / name).read_text() == body, f"{name} differs from its copy in docs/extending.md"


@pytest.mark.anyio
async def test_the_calculator_tool() -> None:
    [calculator] = load_tools(["examples.calculator_tool:calculator"])
    context = ToolContext(FakeSandbox(), 1.0)
    assert (await calculator.call({"expression": "48213 * 9981"}, context)).text == "481213953"
    assert (await calculator.call({"expression": "(1/3 + 1/6) * 12"}, context)).text == "6"
    bad = await calculator.call({"expression": "__import__('os')"}, context)
    assert bad.status == "error" and "not arithmetic" in bad.text


@pytest.mark.anyio
async def test_the_engine_tools_and_reward_together(tmp_path: Path) -> None:
    from examples.scripted_engine import ScriptedEngine
    from rstar2_async.rollout import HFChatTokenizer

    model = cached_tiny_model(Path("runs/cache"))
    problems = [Problem(id="a", problem="What is 48 * 97?", answer="4656"), Problem(id="b", problem="What is 12 * 12?", answer="144")]
    config = RolloutConfig(max_turns=3, max_response_tokens=512, tools=["rstar2_async.rollout.tools:python", "examples.calculator_tool:calculator"])
    async with SandboxPool(SandboxConfig(workers=1)) as sandbox, Grader(workers=1, function="examples.concise_reward:concise") as grader:
        engine = RolloutEngine(
            backend=ScriptedEngine(model), sandbox=sandbox, config=config, tokenizer=HFChatTokenizer.from_pretrained(model), reward=grader
        )
        assert "calculator" in engine.toolbox.system_prompt()
        groups = await engine.run(problems, n=2)
    for group in groups:
        for t in group.trajectories:
            assert t.finish_reason == "answer" and t.num_tool_calls == 1 and t.reward == 1.0, t.response_text
            assert t.turns[0].tool_results[0].output == group.problem.answer  # the real sandbox computed it
