"""``rstar2 serve CONFIG`` against fake engine processes: addresses printed, Ctrl-C stops all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rstar2_async.cli.main import main
from tests.backends.test_fleet import FAKE


def test_serve_prints_addresses_and_stops_on_sigint(tmp_path: Path) -> None:
    (tmp_path / "fake.py").write_text(FAKE)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "fake.py"} "$@"\n')
    python.chmod(0o755)
    config = tmp_path / "fleet.toml"
    config.write_text(
        f'[fleet]\nmodel = "{tmp_path / "m"}"\npython = "{python}"\nnum_servers = 1\nbase_port = 0\n'
        f'log_dir = "{tmp_path / "logs"}"\nenv = {{FAKE_RECORD = "{tmp_path / "rec.jsonl"}"}}\n'
    )
    assert main(["serve", str(config)]) == 2  # base_port = 0 is out of bounds
    config.write_text(config.read_text().replace("base_port = 0\n", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2_async.cli.main", "serve", str(config), "--num-servers", "2"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )
    try:
        lines = [proc.stdout.readline() for _ in range(3)]  # type: ignore[union-attr]
        assert all(line.startswith("http://127.0.0.1:") for line in lines[:2])
        assert json.loads(lines[2])["servers"] == [line.strip() for line in lines[:2]]
        pids = [json.loads(r)["pid"] for r in (tmp_path / "rec.jsonl").read_text().splitlines()]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        proc.kill()


def test_serve_refuses_an_unreadable_secret_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "fleet.toml"
    config.write_text(f'[fleet]\nmodel = "{tmp_path / "m"}"\nhost = "0.0.0.0"\napi_key_file = "{tmp_path / "nope"}"\n')
    assert main(["serve", str(config)]) == 2
    assert "api_key_file" in capsys.readouterr().err
