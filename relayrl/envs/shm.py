"""Named numpy arrays in one POSIX shared-memory block.

The parent creates the block (``SharedArrays.create``): Python's resource tracker then unlinks it
even if the parent is SIGKILLed. Workers attach by name with ``shm_open`` + ``mmap`` directly, so
they never register the block with the tracker (Python 3.11's ``SharedMemory`` would, and the
shared tracker would then unlink or warn about a block the parent still owns). The block is
created user-only (0600) under a random name.
"""

from __future__ import annotations

import mmap
import os
from multiprocessing import shared_memory

import numpy as np

Layout = list[tuple[str, tuple[int, ...], np.dtype]]
ALIGN = 64  # one cache line per array start: workers writing neighbouring arrays don't share lines


def _offsets(layout: Layout) -> tuple[list[int], int]:
    offsets, pos = [], 0
    for _, shape, dtype in layout:
        pos = (pos + ALIGN - 1) // ALIGN * ALIGN
        offsets.append(pos)
        pos += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return offsets, max(pos, 1)


def _views(buf, layout: Layout) -> dict[str, np.ndarray]:
    offsets, _ = _offsets(layout)
    return {name: np.ndarray(shape, dtype=dtype, buffer=buf, offset=off)
            for (name, shape, dtype), off in zip(layout, offsets)}


class SharedArrays:
    """Owner side: creates, exposes ``arrays`` and finally unlinks the block."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self._shm = shared_memory.SharedMemory(create=True, size=_offsets(layout)[1])
        self.name = self._shm.name
        self.arrays = _views(self._shm.buf, layout)

    def close(self) -> None:
        if self._shm is None:
            return
        self.arrays = {}
        shm, self._shm = self._shm, None
        try:
            shm.close()
        except BufferError:  # a caller still holds a view; the unlink below still frees the name
            pass
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


class AttachedArrays:
    """Worker side: maps an existing block by name, without the resource tracker."""

    def __init__(self, name: str, layout: Layout):
        import _posixshmem

        size = _offsets(layout)[1]
        fd = _posixshmem.shm_open("/" + name.lstrip("/"), os.O_RDWR, mode=0o600)
        try:
            self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.arrays = _views(self._mmap, layout)

    def close(self) -> None:
        self.arrays = {}
        try:
            self._mmap.close()
        except BufferError:
            pass
