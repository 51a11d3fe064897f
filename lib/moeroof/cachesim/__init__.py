"""The expert-cache simulator: trace-driven simulation and miss-ratio curves (docs/models.md,
caches).

:mod:`~moeroof.cachesim.requests` turns a routing trace into the stream of (layer, expert)
requests a batch makes, step by step; :mod:`~moeroof.cachesim.policies` replays it through a
cache (LRU, LFU, a pinned set, Belady, S3-FIFO, ARC) for hits, misses and bytes streamed per
step; :mod:`~moeroof.cachesim.curves` gives the hit rate at every capacity at once (exact
LRU stack distances, the Che approximation, SHARDS sampling). Their inner loops are the C
kernels of :mod:`moeroof.kernels.cache`, imported only inside the functions that run one, so
importing this package (the step model, the command line's parsers) loads no library.
"""

from __future__ import annotations

from moeroof.cachesim.curves import *  # noqa: F403
from moeroof.cachesim.curves import __all__ as _curves
from moeroof.cachesim.policies import *  # noqa: F403
from moeroof.cachesim.policies import __all__ as _policies
from moeroof.cachesim.requests import *  # noqa: F403
from moeroof.cachesim.requests import __all__ as _requests

__all__ = [*_requests, *_policies, *_curves]
