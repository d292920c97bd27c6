"""The ``rstar2`` command: one subcommand per module in this package (``demo``,
``train``, ``eval``, ``serve``, ``sandbox``), each with ``HELP``, ``add_arguments``
and ``run``; ``main`` builds the parser from them."""

from .main import main

__all__ = ["main"]
