"""Entry point of the ``rstar2`` command.

Each subcommand lives in ``rstar2_async/cli/<name>.py`` and defines ``HELP`` (one
line), ``add_arguments(parser)`` and ``run(args) -> int``.  Modules are imported
only to build the parser; heavy imports (torch, vLLM clients) happen inside ``run``
so that ``rstar2 --help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module; the order is the order shown by --help.
COMMANDS: dict[str, str] = {
    "demo": "rstar2_async.cli.demo",
    "train": "rstar2_async.cli.train",
    "eval": "rstar2_async.cli.eval",
    "serve": "rstar2_async.cli.serve",
    "sandbox": "rstar2_async.cli.sandbox",
    "view": "rstar2_async.cli.view",
    "report": "rstar2_async.cli.report",
}

DESCRIPTION = """\
rstar2-async: agentic RL for reasoning models that run Python (rStar2-Agent style).

Rollouts run as structured-concurrency tasks against OpenAI-compatible servers
(vLLM, SGLang, any endpoint); tool calls execute in a warm, jailed sandbox pool;
finished groups train a DeepSpeed GRPO-RoC learner.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rstar2",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # Errors a user can act on (a bad config, a missing data set, an unreachable
        # server, a machine that cannot jail) print one line; bugs keep their traceback.
        leaf = _sole_leaf(exc)
        if not isinstance(leaf, _user_errors()):
            raise
        print(f"rstar2 {args.command}: {type(leaf).__name__}: {leaf}", file=sys.stderr)
        return 2


def _sole_leaf(exc: BaseException) -> BaseException:
    """The one real error inside nested exception groups (task groups wrap errors)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _user_errors() -> tuple[type[BaseException], ...]:
    from backends import BackendError
    from rstar2_async.errors import Rstar2Error
    from sandbox import SandboxError

    return (Rstar2Error, BackendError, SandboxError, OSError)


if __name__ == "__main__":
    sys.exit(main())
