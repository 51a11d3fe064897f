"""Seeded random generators: the one way the suite turns a seed into a generator.

``generator(seed, *keys)`` is ``numpy.random.default_rng([seed, *keys])`` — with no keys the
same stream as ``default_rng(seed)`` (numpy seeds an integer and the one-element list alike) —
and a string seed stands for :func:`seed_of` of it, the sum of its code points (the suite's
named streams: ``generator("deepseek-v3-like")`` is ``default_rng(sum(map(ord,
"deepseek-v3-like")))``). Keys split one seed into independent streams, e.g. one per
(seed, streams M) of the cache ladder. The committed data, figures and tests pin these
streams, so the mapping never changes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["seed_of", "generator"]


def seed_of(name: str | int) -> int:
    """The integer seed of a named stream: the sum of the name's code points (an int stays)."""
    if isinstance(name, str):
        return sum(map(ord, name))
    if isinstance(name, bool) or int(name) != name or name < 0:
        raise ValueError(f"a seed is a non-negative integer or a name, got {name!r}")
    return int(name)


def generator(seed: str | int, *keys: str | int) -> np.random.Generator:
    """``numpy.random.default_rng([seed, *keys])``; strings go through :func:`seed_of`."""
    entropy = [seed_of(seed), *(seed_of(k) for k in keys)]
    return np.random.default_rng(entropy[0] if len(entropy) == 1 else entropy)
