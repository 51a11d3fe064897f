"""The one way the suite starts a local dask.distributed cluster.

Worker processes with one thread each (the kernels are single-threaded numpy and C, so
processes, not threads, give parallelism), and the scheduler's dashboard on a free port
(``":0"``): the default 8787 warns with a different port number whenever it is taken, which
would put run-dependent text into reports.
"""

from __future__ import annotations

import logging
from typing import Any

from moeroof.core.optional import require

__all__ = ["local_cluster"]


def local_cluster(workers: int) -> Any:
    """A ``distributed.LocalCluster`` of ``workers`` processes, one thread each."""
    LocalCluster = require("distributed", "sweep", "a local dask cluster").LocalCluster

    # silence_logs: the workers' and nannies' WARNING lines (a task cancelled by Ctrl-C, a worker
    # killed) are not the user's business; the sweep's summary says what was lost
    return LocalCluster(
        n_workers=int(workers),
        processes=True,
        threads_per_worker=1,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    )
