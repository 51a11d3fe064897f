"""Reading a ``.npy`` array so that a file cut short never kills the process.

:func:`numpy.load` with ``mmap_mode`` maps the file: when the file is truncated while mapped
(another program rewriting it, a copy still in progress), touching a page past the new end
raises SIGBUS and the interpreter dies without a message. :func:`load_npy` instead

- checks the header's declared size against the file's size before anything is read (a file
  already cut short is an error naming both sizes);
- reads the file into memory with ordinary reads, checking every byte arrived — a file
  truncated during the read is then a :class:`ValueError`, never a signal — when its data is at
  most :data:`COPY_LIMIT_BYTES`, or at most :data:`COPY_MEMORY_SHARE` of the available memory
  (:func:`moeroof.core.limits.available_memory`; once, ``histogram`` and ``fit`` on a
  600 MB trace truncated a second into the run died of SIGBUS through the map);
- memory-maps (read-only) only a file larger than both, where copying it is not an option
  (``COPY_LIMIT_BYTES = 0`` maps every file: the shard workers and their tests); such a file
  must not be rewritten while a command reads it, and :func:`checked_blocks` reads a map a
  block at a time, checking the file still holds each block before touching it.

Object arrays are refused (no pickles are ever loaded).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np

from moeroof.core.input_files import open_input

__all__ = ["COPY_LIMIT_BYTES", "COPY_MEMORY_SHARE", "TruncatedError", "checked_blocks", "load_npy", "npy_layout"]

#: a ``.npy`` whose data is at most this size is read into memory rather than mapped
COPY_LIMIT_BYTES = 512 * 2**20
#: a larger one too while its data is at most this share of the available memory
COPY_MEMORY_SHARE = 0.5


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
    with open_input(path) as fh:  # a FIFO refused, never waited on
        shape, fortran, dtype = read_npy_header(fh)
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
    if dtype.hasobject:
        raise ValueError("the array holds Python objects (pickles are never loaded)")
    need = math.prod(int(n) for n in shape) * dtype.itemsize
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


def _copy_limit() -> float:
    """Bytes of data :func:`load_npy` reads into memory by default (module docstring)."""
    if COPY_LIMIT_BYTES <= 0:
        return 0.0
    from moeroof.core.limits import available_memory

    return max(float(COPY_LIMIT_BYTES), COPY_MEMORY_SHARE * available_memory())


def load_npy(path: str | os.PathLike[str], copy_limit: int | None = None) -> np.ndarray:
    """The array in a ``.npy`` file, read so that truncation is a :class:`ValueError` (see the
    module docstring): in memory up to ``copy_limit`` bytes of data (default: the larger of
    :data:`COPY_LIMIT_BYTES` and :data:`COPY_MEMORY_SHARE` of the available memory), a read-only
    :class:`numpy.memmap` beyond."""
    path = Path(path)
    shape, dtype, fortran, offset = npy_layout(path)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    limit = copy_limit if copy_limit is not None else _copy_limit()
    order: Literal["C", "F"] = "F" if fortran else "C"
    if nbytes > limit:
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
    out = np.empty(count, dtype=dtype)
    view = out.view(np.uint8).reshape(-1).data if nbytes else memoryview(b"")
    got = 0
    with open_input(path) as fh:
        fh.seek(offset)
        while got < nbytes:
            n = fh.readinto(view[got:])
            if not n:
                raise TruncatedError(f"truncated while being read: got {got} of {nbytes} bytes of data")
            got += n
    return out.reshape(shape, order=order)


#: bytes of a memory map :func:`checked_blocks` copies at once
BLOCK_BYTES = 64 << 20


def checked_blocks(arr: Any, block_bytes: int | None = None):
    """``(start, block)`` over the first axis of ``arr``, each block an in-memory array of at most
    about ``block_bytes`` (default :data:`BLOCK_BYTES`; at least one row).

    A C-order :class:`numpy.memmap` is checked before each block is touched: the file must still
    hold the block's bytes, else :class:`TruncatedError` — the window in which a truncation can
    still raise SIGBUS shrinks from the whole run to the copy of one block. Other arrays (and
    lazy readers that index by steps, such as :class:`moeroof.data.io.NpySteps`, which check
    their own reads) are sliced as they are."""
    n = int(arr.shape[0]) if getattr(arr, "ndim", 0) else 0
    row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * np.dtype(arr.dtype).itemsize) if n else 1
    step = max(1, int(block_bytes or BLOCK_BYTES) // row_bytes)
    mapped = isinstance(arr, np.memmap) and arr.filename is not None and arr.flags.c_contiguous
    base = int(arr.offset) if mapped else 0
    for s0 in range(0, n, step):
        s1 = min(n, s0 + step)
        if mapped:
            need = base + s1 * row_bytes
            size = os.stat(arr.filename).st_size
            if size < need:
                raise TruncatedError(
                    f"{arr.filename}: truncated while being read: the file holds {size} bytes, rows "
                    f"{s0}..{s1 - 1} need {need}"
                )
            yield s0, np.array(arr[s0:s1])
        else:
            yield s0, np.asarray(arr[s0:s1])
