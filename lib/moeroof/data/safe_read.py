"""Reading a ``.npy`` array so that a file cut short never kills the process.

:func:`numpy.load` with ``mmap_mode`` maps the file: when the file is truncated while mapped
(another program rewriting it, a copy still in progress), touching a page past the new end
raises SIGBUS and the interpreter dies without a message. :func:`load_npy` instead

- checks the header's declared size against the file's size before anything is read (a file
  already cut short is an error naming both sizes);
- reads a file of at most :data:`COPY_LIMIT_BYTES` (or a quarter of the available memory,
  whichever is smaller) into memory with ordinary reads, checking every byte arrived — a file
  truncated during the read is then a :class:`ValueError`, never a signal;
- memory-maps (read-only) only a larger file, where copying it is not an option; such a file
  must not be rewritten while a command reads it.

Object arrays are refused (no pickles are ever loaded).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["COPY_LIMIT_BYTES", "TruncatedError", "load_npy", "npy_layout"]

#: a ``.npy`` whose data is at most this size is read into memory rather than mapped
COPY_LIMIT_BYTES = 512 * 2**20


class TruncatedError(ValueError):
    """The file holds fewer bytes than its header declares."""


def read_npy_header(fh: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` from the ``.npy`` header at ``fh``'s position, leaving
    ``fh`` at the first data byte; reads the header only (a file, or a zip member's stream)."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fh)
    if version in ((2, 0), (3, 0)):
        return np.lib.format.read_array_header_2_0(fh)
    raise ValueError(f"unsupported .npy format version {version}")


def npy_layout(path: str | os.PathLike[str]) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """``(shape, dtype, fortran_order, data_offset)`` from a ``.npy`` header; :class:`ValueError`
    for a file that is not a ``.npy``, holds objects, or holds other than the bytes its header declares."""
    with open(path, "rb") as fh:
        shape, fortran, dtype = read_npy_header(fh)
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
    if dtype.hasobject:
        raise ValueError("the array holds Python objects (pickles are never loaded)")
    count = 1
    for n in shape:
        count *= int(n)
    need = count * dtype.itemsize
    if size - offset < need:
        raise TruncatedError(
            f"truncated: the header declares shape {tuple(shape)} of {dtype} ({need} bytes of data) "
            f"but the file holds {max(0, size - offset)}"
        )
    if size - offset > need:
        # np.save and open_memmap write exactly the declared bytes: more is a different file
        raise ValueError(
            f"the header declares shape {tuple(shape)} of {dtype} ({need} bytes of data) but the file "
            f"holds {size - offset}: {size - offset - need} bytes more than its header says"
        )
    return tuple(int(n) for n in shape), dtype, bool(fortran), offset


def _memory_available() -> float:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return float("inf")


def load_npy(path: str | os.PathLike[str], copy_limit: int | None = None) -> np.ndarray:
    """The array in a ``.npy`` file, read so that truncation is a :class:`ValueError` (see the
    module docstring): in memory up to ``copy_limit`` bytes of data (default the smaller of
    :data:`COPY_LIMIT_BYTES` and a quarter of the available memory), a read-only
    :class:`numpy.memmap` beyond."""
    path = Path(path)
    shape, dtype, fortran, offset = npy_layout(path)
    count = 1
    for n in shape:
        count *= n
    nbytes = count * dtype.itemsize
    limit = copy_limit if copy_limit is not None else min(COPY_LIMIT_BYTES, _memory_available() / 4)
    order = "F" if fortran else "C"
    if nbytes > limit:
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
    out = np.empty(count, dtype=dtype)
    view = memoryview(out.view(np.uint8).reshape(-1)) if nbytes else memoryview(b"")
    got = 0
    with open(path, "rb") as fh:
        fh.seek(offset)
        while got < nbytes:
            n = fh.readinto(view[got:])
            if not n:
                raise TruncatedError(f"truncated while being read: got {got} of {nbytes} bytes of data")
            got += n
    return out.reshape(shape, order=order)
