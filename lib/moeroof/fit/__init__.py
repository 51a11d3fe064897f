"""moeroof.fit: the fitters, each of one set of knobs to one kind of measurement.

:mod:`~moeroof.fit.skew` fits a routing's skew (Zipf s, Dirichlet α) to expert histograms,
:mod:`~moeroof.fit.routing` fits the routing knobs (skew, stickiness, per-stream locality,
history) to measured cache points, and :mod:`~moeroof.fit.plan` fits the step's knobs (engine
costs, SSD scale, memory pressure, and the cache knobs) to measured tok/s. They sit above the
models they fit (``core ← data ← models ← fit ← studies``: tests/test_layout.py).
"""
