"""The ``rstar2`` command: one subcommand per module in this package."""
