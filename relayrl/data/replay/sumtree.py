"""Sum and min trees over a fixed number of leaves, updated and searched a batch at a time.

The trees are K-ary (K = 16 by default): with numpy doing the work, each level costs a few array
calls whatever its width, so a 1M-leaf tree of 4 levels is searched and updated in a fraction of
the time of a 20-level binary tree. Parents are recomputed from their children on every update
(no incremental deltas), so sums never drift.
"""

from __future__ import annotations

import numpy as np

BRANCH = 16


class SegmentTree:
    """``levels[0]`` holds the leaves (padded to a power of K); ``levels[j][i]`` combines children
    ``levels[j-1][i*K:(i+1)*K]``; ``levels[-1]`` has one node, the root."""

    def __init__(self, capacity: int, reduce: np.ufunc, neutral: float, branch: int = BRANCH):
        self.capacity, self.reduce, self.neutral, self.k = capacity, reduce, neutral, branch
        size, depth = 1, 0
        while size < capacity:
            size, depth = size * branch, depth + 1
        self.levels = [np.full(size // branch**j, neutral, dtype=np.float64) for j in range(depth + 1)]

    def update(self, index: np.ndarray, value: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``value`` (the last write wins for repeated indices)."""
        nodes = np.asarray(index, dtype=np.int64)
        self.levels[0][nodes] = value
        k = self.k
        for j in range(1, len(self.levels)):
            nodes = nodes // k
            self.levels[j][nodes] = self.reduce.reduce(self.levels[j - 1].reshape(-1, k)[nodes], axis=1)

    def __getitem__(self, index) -> np.ndarray:
        return self.levels[0][np.asarray(index, dtype=np.int64)]

    @property
    def root(self) -> float:
        return float(self.levels[-1][0])

    def leaves(self) -> np.ndarray:
        return self.levels[0][:self.capacity]

    def load_leaves(self, values: np.ndarray) -> None:
        self.levels[0][:] = self.neutral
        self.levels[0][:len(values)] = values
        for j in range(1, len(self.levels)):
            self.levels[j][:] = self.reduce.reduce(self.levels[j - 1].reshape(-1, self.k), axis=1)


class SumTree(SegmentTree):
    def __init__(self, capacity: int, branch: int = BRANCH):
        super().__init__(capacity, np.add, 0.0, branch)

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each value in ``prefix`` (in [0, root)), the leaf where the running sum passes it;
        leaves of weight 0 are never chosen."""
        values = np.array(prefix, dtype=np.float64)
        nodes = np.zeros(len(values), dtype=np.int64)
        rows = np.arange(len(values))
        k = self.k
        for j in range(len(self.levels) - 1, 0, -1):
            children = self.levels[j - 1].reshape(-1, k)[nodes]
            csum = np.cumsum(children, axis=1)
            choice = np.minimum((csum <= values[:, None]).sum(axis=1), k - 1)
            empty = children[rows, choice] <= 0  # rounding pushed past the last non-empty child
            if empty.any():
                positive = children[empty] > 0
                choice[empty] = k - 1 - np.argmax(positive[:, ::-1], axis=1)
            values -= np.where(choice > 0, csum[rows, np.maximum(choice - 1, 0)], 0.0)
            nodes = nodes * k + choice
        return np.minimum(nodes, self.capacity - 1)


class MinTree(SegmentTree):
    def __init__(self, capacity: int, branch: int = BRANCH):
        super().__init__(capacity, np.minimum, np.inf, branch)
