"""Run the sandbox as a service on a CPU node, or measure it.

  rstar2 sandbox serve [--host 127.0.0.1] [--port 8089] [--workers N] [--config run.toml] [--secret-file F]
  rstar2 sandbox bench [--workers N] [--quick] [--no-baselines]

``serve`` starts a warm, jailed worker pool and answers POST /v1/run and
/v1/batch, GET /health and /metrics (see ``sandbox._service``).  It refuses to
start where the machine cannot jail, unless ``--insecure``.  Every request must
carry the shared secret (``authorization: Bearer ...``) read from ``--secret-file``
or ``$RSTAR2_SANDBOX_SECRET``; on an address other than loopback without one, a
secret is generated and printed once, unless ``--insecure`` (no secret at all).
SIGTERM/SIGINT: new connections are refused, calls in flight are answered, then
the pool stops.  ``bench`` prints the latency/throughput comparison as JSON on its
last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib

HELP = "serve the jailed Python sandbox over HTTP, or benchmark it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    serve.add_argument("--port", type=int, default=8089)
    serve.add_argument("--secret-file", help="file holding the shared secret (else $RSTAR2_SANDBOX_SECRET)")
    _common(serve)
    bench = sub.add_parser("bench", help="latency/throughput vs a process per call; JSON on the last line")
    _common(bench)
    bench.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    bench.add_argument("--no-baselines", action="store_true", help="measure only the pool")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=None, help="warm workers (default: cores)")
    p.add_argument("--config", help="TOML file; its [sandbox] table (or the whole file) is a SandboxConfig")
    p.add_argument(
        "--insecure", action="store_true",
        help="run even without a full jail, and (serve) without a secret off loopback (never with untrusted code)",
    )


def _config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from sandbox import SandboxConfig

    data: dict = {}
    if args.config:
        with open(args.config, "rb") as f:
            loaded = tomllib.load(f)
        data = dict(loaded.get("sandbox", loaded))
    if args.workers is not None:
        data["workers"] = args.workers
    if args.insecure:
        data["insecure"] = True
    return SandboxConfig.from_dict(data)


def run(args: argparse.Namespace) -> int:
    import anyio
    import msgspec

    from httpgate import resolve_secret
    from sandbox import SECRET_ENV, SandboxError

    try:
        config = _config(args)
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as e:
        print(f"rstar2 sandbox: bad configuration: {e}", file=sys.stderr)
        return 2
    try:
        if args.sandbox_command == "serve":
            try:
                secret = resolve_secret(
                    args.host, file=args.secret_file, env=SECRET_ENV, insecure=args.insecure, announce=_announce
                )
            except ValueError as e:
                print(f"rstar2 sandbox: {e}", file=sys.stderr)
                return 2
            anyio.run(_serve, config, args.host, args.port, secret, args.insecure)
            return 0
        from sandbox import benchmark

        sizes = dict(n_latency=20, n_throughput=64, n_baseline=3, n_baseline_throughput=16) if args.quick else {}
        result = anyio.run(lambda: benchmark(
            config, baselines=not args.no_baselines, log=lambda s: print(s, file=sys.stderr, flush=True), **sizes
        ))
        print(json.dumps(result))
        return 0
    except SandboxError as e:
        print(f"rstar2 sandbox: {e}", file=sys.stderr)
        return 1


def _announce(secret: str) -> None:
    from sandbox import SECRET_ENV

    print(
        f"rstar2 sandbox: no secret given; generated one (shown once; give it to the clients, "
        f"e.g. as ${SECRET_ENV} on the next start): {secret}",
        file=sys.stderr, flush=True,
    )


async def _serve(config, host: str, port: int, secret: str | None, insecure: bool) -> None:  # type: ignore[no-untyped-def]
    import signal

    import anyio

    from sandbox import SandboxPool, SandboxService

    async with SandboxPool(config) as pool, anyio.create_task_group() as tg:
        service = SandboxService(pool, host=host, port=port, secret=secret, insecure=insecure)
        bound = await tg.start(service.serve)
        stats = pool.statistics()
        print(
            f"rstar2 sandbox: serving on http://{host}:{bound} with {stats.workers} workers "
            f"(layers: {', '.join(k for k, v in stats.layers.items() if v) or 'none'}; "
            f"{'secret required' if secret else 'NO SECRET'})",
            file=sys.stderr, flush=True,
        )
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                print(f"rstar2 sandbox: {signal.Signals(signum).name}: answering calls in flight, then stopping",
                      file=sys.stderr, flush=True)
                await service.shutdown()
                break
