"""Run a fleet of inference servers in the foreground: ``rstar2 serve CONFIG``.

CONFIG is a TOML file with a ``[fleet]`` table (see ``backends.FleetConfig``)::

    [fleet]
    model = "/models/qwen3-14b"
    engine = "vllm"          # or "sglang"
    num_servers = 8
    gpu_ids = [[0], [1], [2], [3], [4], [5], [6], [7]]
    base_port = 8000

With a shared secret (``api_key_file`` or ``$api_key_env``, ``RSTAR2_API_KEY`` by
default; on a host other than loopback without one, a secret is generated and
printed once, unless ``--insecure``), each engine binds to loopback and an
authenticating proxy answers on the server's address: every route, vLLM's
dev-mode ones included, needs ``authorization: Bearer <secret>``.

Once every server is ready, their addresses are printed, one per line, then one
JSON line ``{"servers": [...], "engine": ...}``.  Servers that die are restarted
on the same address.  Ctrl-C (or SIGTERM) stops them all.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib

HELP = "run K inference servers (vLLM or SGLang) in the foreground and print their addresses"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="TOML file with a [fleet] table")
    parser.add_argument("--num-servers", type=int, help="override fleet.num_servers")
    parser.add_argument(
        "--insecure", action="store_true", help="serve a non-loopback host without a secret (anyone reaching it can use it)"
    )


def run(args: argparse.Namespace) -> int:
    import anyio
    import msgspec

    from backends import Fleet, FleetConfig, LaunchError, ServerDied
    from httpgate import resolve_secret

    try:
        with open(args.config, "rb") as f:
            table = tomllib.load(f).get("fleet")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        print(f"rstar2 serve: cannot read {args.config}: {exc}", file=sys.stderr)
        return 2
    if table is None:
        print(f"rstar2 serve: {args.config} has no [fleet] table", file=sys.stderr)
        return 2
    if args.num_servers is not None:
        table["num_servers"] = args.num_servers
    try:
        config = msgspec.convert(table, FleetConfig)
    except (msgspec.ValidationError, ValueError) as exc:
        print(f"rstar2 serve: {args.config}: {exc}", file=sys.stderr)
        return 2
    try:
        secret = resolve_secret(
            config.host, file=config.api_key_file, env=config.api_key_env, insecure=args.insecure, announce=_announce
        )
    except ValueError as exc:
        print(f"rstar2 serve: fleet.api_key_file: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        import signal

        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with Fleet(config, api_key=secret, insecure=args.insecure) as fleet:
                for spec in fleet.specs():
                    print(spec.url, flush=True)
                print(json.dumps({"engine": config.engine, "servers": [s.url for s in fleet.specs()]}), flush=True)
                async for _ in signals:
                    return

    try:
        anyio.run(main)
    except LaunchError as exc:
        print(f"rstar2 serve: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        died, _ = group.split(ServerDied)
        if died is None:
            raise
        print(f"rstar2 serve: a server kept dying: {died.exceptions[0]}", file=sys.stderr)
        return 1
    return 0


def _announce(secret: str) -> None:
    print(
        "rstar2 serve: no secret given (fleet.api_key_file / $fleet.api_key_env); generated one, shown once: "
        f"{secret}\n  the trainer sends it from the variable its [inference] api_key_env names",
        file=sys.stderr, flush=True,
    )
