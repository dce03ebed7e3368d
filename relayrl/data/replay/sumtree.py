"""Sum and min segment trees over a fixed number of leaves, updated and searched a batch at a time."""

from __future__ import annotations

import numpy as np


class SegmentTree:
    """Binary tree in one array: leaves at ``[size, 2 * size)``, node i combines 2i and 2i + 1."""

    def __init__(self, capacity: int, op: np.ufunc, neutral: float):
        self.capacity = capacity
        self.size = 1 << max(0, (capacity - 1).bit_length())
        self.depth = self.size.bit_length() - 1
        self.op, self.neutral = op, neutral
        self.tree = np.full(2 * self.size, neutral, dtype=np.float64)

    def update(self, index: np.ndarray, value: np.ndarray) -> None:
        """Set leaves ``index`` to ``value`` (the last write wins for repeated indices)."""
        nodes = np.asarray(index, dtype=np.int64) + self.size
        self.tree[nodes] = value
        for _ in range(self.depth):
            nodes = np.unique(nodes >> 1)
            self.tree[nodes] = self.op(self.tree[2 * nodes], self.tree[2 * nodes + 1])

    def __getitem__(self, index) -> np.ndarray:
        return self.tree[np.asarray(index, dtype=np.int64) + self.size]

    @property
    def root(self) -> float:
        return float(self.tree[1])

    def leaves(self) -> np.ndarray:
        return self.tree[self.size:self.size + self.capacity]

    def load_leaves(self, values: np.ndarray) -> None:
        self.tree[:] = self.neutral
        self.tree[self.size:self.size + len(values)] = values
        for level in range(self.depth - 1, -1, -1):
            lo, hi = 1 << level, 1 << (level + 1)
            nodes = np.arange(lo, hi)
            self.tree[nodes] = self.op(self.tree[2 * nodes], self.tree[2 * nodes + 1])


class SumTree(SegmentTree):
    def __init__(self, capacity: int):
        super().__init__(capacity, np.add, 0.0)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each value in ``prefix`` (in [0, root)), the leaf where the running sum passes it."""
        values = np.array(prefix, dtype=np.float64)
        nodes = np.ones(len(values), dtype=np.int64)
        for _ in range(self.depth):
            left = self.tree[2 * nodes]
            right = values >= left
            values -= left * right
            nodes = 2 * nodes + right
        return np.minimum(nodes - self.size, self.capacity - 1)


class MinTree(SegmentTree):
    def __init__(self, capacity: int):
        super().__init__(capacity, np.minimum, np.inf)
