"""Looking at a run: ``rstar2 view`` (a local web page over a run directory, live while
it is written) and ``rstar2 report`` (one self-contained HTML file).

``_source`` reads a run directory as it grows (read-only; the trainer's trajectory
recorder writes ``trajectories/`` with an index so a table never reads the records),
``_app`` is the ASGI app hypercorn serves, ``assets/`` the page (plain HTML, CSS and
JS, no build step, nothing fetched from elsewhere), ``_report`` the report, and
``_sample_run`` a generated run directory to try them on.
"""

from ._app import ViewApp, serve
from ._report import build_report
from ._sample_run import write_sample_run
from ._source import Query, RunDirError, RunReader, Table

__all__ = ["Query", "RunDirError", "RunReader", "Table", "ViewApp", "build_report", "serve", "write_sample_run"]
