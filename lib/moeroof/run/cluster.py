"""The one way the suite starts a local dask.distributed cluster, and opens a client.

Worker processes with one thread each (the kernels are single-threaded numpy and C, so
processes, not threads, give parallelism), and the scheduler's dashboard on a free port
(``":0"``): the default 8787 warns with a different port number whenever it is taken, which
would put run-dependent text into reports.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from moeroof.core.optional import require

__all__ = ["local_cluster", "open_client", "worker_count"]


def local_cluster(workers: int) -> Any:
    """A ``distributed.LocalCluster`` of ``workers`` processes, one thread each."""
    LocalCluster = require("distributed", "sweep", "a local dask cluster").LocalCluster

    # silence_logs: the workers' and nannies' WARNING lines (a task cancelled by Ctrl-C, a worker
    # killed) are not the user's business; the sweep's summary says what was lost
    return LocalCluster(
        n_workers=int(workers), processes=True, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.ERROR
    )


@contextlib.contextmanager
def open_client(client: Any, scheduler: str | None, workers: int, purpose: str) -> Iterator[Any]:
    """The client to submit to, or None for serial: ``client`` as given, a ``Client(scheduler)``
    for an address, or a :func:`local_cluster` of ``workers`` processes; None when none of them
    is asked for (no client, no scheduler, one worker). What it opens is closed on exit.
    ``purpose`` names the run in the error when distributed is not installed."""
    with contextlib.ExitStack() as opened:
        if client is None and (scheduler is not None or workers > 1):
            Client = require("distributed", "sweep", purpose).Client
            cluster = scheduler
            if scheduler is None:
                cluster = local_cluster(workers)
                opened.callback(cluster.close)  # after the client's close
            client = opened.enter_context(Client(cluster))
        yield client


def worker_count(client: Any, default: int) -> int:
    """The workers of ``client``'s cluster (at least 1), or ``default`` without a client."""
    return default if client is None else max(1, len(client.scheduler_info().get("workers", {})))
