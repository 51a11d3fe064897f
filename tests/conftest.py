"""Shared test fixtures: seeded generators and the path to the captured external data."""

from __future__ import annotations

import numpy as np
import pytest

from moeroof.core.paths import EXTERNAL_DIR


def seeded(name: str) -> np.random.Generator:
    """A generator derived from a name, so each test's randomness is fixed and independent."""
    return np.random.default_rng(sum(map(ord, name)))


@pytest.fixture
def rng(request) -> np.random.Generator:
    return seeded(request.node.name)


def external(relpath: str):
    """Path into ../shared/data/external, skipping the test when the folder is absent."""
    path = EXTERNAL_DIR / relpath
    if not path.exists():
        pytest.skip(f"captured data not present at {path} (a clone without ../shared)")
    return path
