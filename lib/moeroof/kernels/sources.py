"""The hash of the C kernels' sources, shared by the build (``setup.py`` loads this file by its
path, before moeroof or numpy can be imported) and :mod:`moeroof.kernels.loader` (which compares it
with the hash the library was built from). Standard library only."""

from __future__ import annotations

import hashlib
from pathlib import Path

#: the extension the C kernels are built into, and where its sources are (relative to ``lib/``)
MODULE = "moeroof.kernels._native"
SOURCE_DIR = Path("moeroof") / "kernels" / "native"


def native_files(folder: Path) -> list[Path]:
    """The sources and headers of the C kernels in ``folder``, sorted by name."""
    return sorted([*Path(folder).glob("*.c"), *Path(folder).glob("*.h")], key=lambda p: p.name)


def sources_hash(folder: Path) -> str:
    """blake2b (20 hex digits) of every file's name and bytes in :func:`native_files` order."""
    h = hashlib.blake2b(digest_size=10)
    for f in native_files(folder):
        h.update(f.name.encode())
        h.update(b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()
