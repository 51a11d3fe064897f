"""The compiled core: every compiled kernel of the suite, one C source each (``native/``), built
at install into the extension ``moeroof.kernels._native`` (``setup.py``) and called through
:mod:`ctypes`: :mod:`~moeroof.kernels.loader` opens the library (refusing one built from other
sources), :mod:`~moeroof.kernels.cache` wraps the cache simulator's kernels,
:mod:`~moeroof.kernels.routing` the routing sampler's and :mod:`~moeroof.kernels.plan` the plan's.
Importing this package loads nothing; a kernel's first call loads the library."""
