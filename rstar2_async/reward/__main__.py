"""``python -m rstar2_async.reward [--function module:name]``: one grading worker,
serving its parent over stdin/stdout (see ``_worker``)."""

from ._worker import main

main()
