"""Look at a run in the browser: its curves and every trajectory, live while it runs.

A local web page over the run directory of `rstar2 train` or `rstar2 eval` (read-only;
everything it needs ships in the package, nothing is fetched from the internet).

Examples:
  rstar2 view runs/cpu-demo                 then open http://127.0.0.1:8265/
  rstar2 view runs/big --host 0.0.0.0 --port 9000   (reachable from other machines)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "a local web page of a run's curves and trajectories (live, read-only)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="run directory of `rstar2 train` or `rstar2 eval`")
    p.add_argument("--port", type=int, default=8265, help="port to listen on (default 8265; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")


def run(args: argparse.Namespace) -> int:
    import anyio

    async def main() -> None:
        from rstar2_async.view import serve

        async with anyio.create_task_group() as tg:
            url = await tg.start(serve, args.run_dir, args.host, args.port)
            print(f"rstar2 view: {args.run_dir} at {url} (Ctrl-C stops)", file=sys.stderr, flush=True)

    anyio.run(main)
    return 0
