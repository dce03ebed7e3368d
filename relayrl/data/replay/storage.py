"""ArrayStorage: a ring of preallocated named arrays, one row per transition, no per-item objects."""

from __future__ import annotations

from typing import Any

import numpy as np

from relayrl.errors import ConfigError
from relayrl.types import Batch, batch_size

Spec = dict[str, tuple[tuple[int, ...], np.dtype]]


class ArrayStorage:
    """Rows ``0 .. capacity - 1`` of a fixed schema of named arrays, written in ring order.

    The schema comes from ``spec`` or from the first batch added. ``generation[i]`` counts how many
    times row i was written, so ``generation * capacity + row`` identifies one item for its lifetime.
    """

    def __init__(self, capacity: int, spec: Spec | None = None):
        if capacity < 1:
            raise ConfigError(f"replay capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.arrays: dict[str, np.ndarray] = {}
        self.generation = np.zeros(capacity, dtype=np.int64)
        self.pos = 0  # next row to write
        self.size = 0
        if spec is not None:
            self._allocate(spec)

    @property
    def spec(self) -> Spec:
        return {k: (a.shape[1:], a.dtype) for k, a in self.arrays.items()}

    def _allocate(self, spec: Spec) -> None:
        self.arrays = {k: np.zeros((self.capacity, *shape), dtype=dtype) for k, (shape, dtype) in spec.items()}

    def add(self, batch: Batch) -> np.ndarray:
        """Write every row of ``batch``; returns the rows written (in order, wrapping around)."""
        n = batch_size(batch)
        if not self.arrays:
            self._allocate({k: (np.asarray(v).shape[1:], np.asarray(v).dtype) for k, v in batch.items()})
        if set(batch) != set(self.arrays):
            raise ValueError(f"batch keys {sorted(batch)} differ from the buffer's {sorted(self.arrays)}")
        for key, array in self.arrays.items():
            if np.shape(batch[key])[1:] != array.shape[1:]:
                raise ValueError(f"batch[{key!r}] has rows of shape {np.shape(batch[key])[1:]}, "
                                 f"the buffer stores {array.shape[1:]}")
        if n > self.capacity:  # only the newest capacity rows survive
            batch = {k: np.asarray(v)[n - self.capacity:] for k, v in batch.items()}
            n = self.capacity
        rows = (self.pos + np.arange(n)) % self.capacity
        if self.pos + n <= self.capacity:  # contiguous: slice assignment, no index arrays
            where: Any = slice(self.pos, self.pos + n)
        else:
            where = rows
        for key, array in self.arrays.items():
            array[where] = batch[key]
        self.generation[where] += 1
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return rows

    def get(self, rows: np.ndarray) -> Batch:
        """Copies of ``rows`` (fancy indexing never aliases storage)."""
        return {key: array[rows] for key, array in self.arrays.items()}

    def oldest_rows(self) -> np.ndarray:
        """Filled rows from the oldest to the newest."""
        start = self.pos if self.size == self.capacity else 0
        return (start + np.arange(self.size)) % self.capacity

    def state_dict(self) -> dict[str, Any]:
        rows = self.oldest_rows()
        return {"arrays": {k: a[rows] for k, a in self.arrays.items()}, "generation": self.generation.copy(),
                "capacity": self.capacity, "pos": self.pos, "size": self.size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"saved buffer has capacity {state['capacity']}, this one {self.capacity}")
        saved = state["arrays"]
        if self.arrays and {k: (v.shape[1:], v.dtype) for k, v in saved.items()} != self.spec:
            raise ValueError(f"saved buffer schema { {k: (v.shape[1:], str(v.dtype)) for k, v in saved.items()} } "
                             f"differs from this buffer's {self.spec}")
        self._allocate({k: (v.shape[1:], v.dtype) for k, v in saved.items()})
        self.size, self.pos = int(state["size"]), int(state["pos"])
        start = self.pos if self.size == self.capacity else 0
        rows = (start + np.arange(self.size)) % self.capacity
        for k, v in saved.items():
            self.arrays[k][rows] = v
        self.generation = np.asarray(state["generation"], dtype=np.int64).copy()
