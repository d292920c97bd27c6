"""What code sees and gets back: streams, exit codes, stdin, limits, isolation of calls."""

from __future__ import annotations

import anyio
import pytest

from sandbox import ExecResult, SandboxPool

from ._helpers import config

pytestmark = pytest.mark.anyio

CASES: list[tuple[str, str, dict]] = [
    # (code, stdin, expected fields)
    ("print('hi')", "", {"status": "ok", "stdout": "hi\n", "exit_code": 0}),
    ("import sys; print('e', file=sys.stderr); sys.exit(3)", "", {"status": "error", "stderr": "e\n", "exit_code": 3}),
    ("raise ValueError('boom')", "", {"status": "error", "exit_code": 1}),
    ("print(input()[::-1])", "abc\n", {"status": "ok", "stdout": "cba\n"}),
    ("import sys; print(len(sys.stdin.read()))", "x" * 200_000, {"status": "ok", "stdout": "200000\n"}),
    ("print('héllo ∑ 😀')", "", {"status": "ok", "stdout": "héllo ∑ 😀\n"}),
    ("import sympy; print(sympy.factorint(2**64-1))", "",
     {"status": "ok", "stdout": "{3: 1, 5: 1, 17: 1, 257: 1, 641: 1, 65537: 1, 6700417: 1}\n"}),
    ("import numpy as np; print(int(np.linalg.det(np.array([[2,0],[0,3]])).round()))", "", {"status": "ok", "stdout": "6\n"}),
    ("from fractions import Fraction; import itertools, math; print(Fraction(1,3)+Fraction(1,6), math.comb(5,2))", "",
     {"status": "ok", "stdout": "1/2 10\n"}),
    ("if __name__ == '__main__': print('main')", "", {"status": "ok", "stdout": "main\n"}),
    ("def f(: pass", "", {"status": "error", "exit_code": 1}),
]


async def test_results_match_python_c() -> None:
    async with SandboxPool(config()) as pool:
        results = [None] * len(CASES)

        async def one(i: int, code: str, stdin: str) -> None:
            results[i] = await pool.run(code, stdin=stdin, timeout=10)

        async with anyio.create_task_group() as tg:
            for i, (code, stdin, _) in enumerate(CASES):
                tg.start_soon(one, i, code, stdin)
        for (code, _, want), got in zip(CASES, results):
            assert isinstance(got, ExecResult)
            for field, value in want.items():
                assert getattr(got, field) == value, (code, got)
    boom = results[2]
    assert "ValueError: boom" in boom.stderr and 'File "<string>", line 1' in boom.stderr
    assert "_worker.py" not in boom.stderr  # only the code's own frames, as with python -c
    assert "SyntaxError" in results[-1].stderr


async def test_timeout_and_output_limit() -> None:
    async with SandboxPool(config(max_output_bytes=4096)) as pool:
        loop = await pool.run("while True: pass", timeout=1.0)
        sleep = await pool.run("import time; print('a', flush=True); time.sleep(30)", timeout=0.5)
        flood = await pool.run("import sys\nwhile True: sys.stdout.write('x' * 65536)", timeout=10)
        big_err = await pool.run("import sys; sys.stderr.write('y' * 10**6)", timeout=10)
        fits = await pool.run("print('z' * 1000)")
    assert loop.status == "timeout" and loop.exit_code is None
    assert sleep.status == "timeout" and sleep.stdout == "a\n"
    assert flood.status == "output_limit" and len(flood.stdout) <= 4096
    assert big_err.status == "output_limit" and len(big_err.stderr) <= 4096
    assert "output limit" in big_err.stderr
    assert fits.status == "ok" and len(fits.stdout) == 1001


async def test_state_does_not_leak_between_calls() -> None:
    async with SandboxPool(config(workers=1)) as pool:
        first = await pool.run(
            "import sympy, math\nsympy.LEAK = 1\nmath.pi = 3\nx = 5\nopen('note', 'w').write('secret')\nimport os; print(os.getcwd())"
        )
        second = await pool.run(
            "import sympy, math, os\nprint(hasattr(sympy, 'LEAK'), math.pi > 3.1, 'x' in globals(), os.listdir('.'))"
        )
    assert first.status == "ok", first
    assert second.stdout == "False True False []\n", second


async def test_oversized_code_is_an_error_result() -> None:
    async with SandboxPool(config(max_code_bytes=100)) as pool:
        r = await pool.run("#" * 101)
    assert r.status == "error" and "max_code_bytes" in r.stderr


async def test_many_concurrent_calls_each_get_their_own_result() -> None:
    async with SandboxPool(config()) as pool:
        got: dict[int, ExecResult] = {}

        async def one(i: int) -> None:
            got[i] = await pool.run(f"print({i} * {i})")

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(one, i)
        stats = pool.statistics()
    assert {i: r.stdout for i, r in got.items()} == {i: f"{i * i}\n" for i in range(60)}
    assert stats.calls == 60 and stats.by_status == {"ok": 60} and stats.queue_depth == 0
