"""Samplers choose rows of a storage. They hear every write and every eviction (STYLE.md: a
prioritized sampler that missed writes made elsewhere would sample stale priorities).

Both draw from the buffer's generator through ``random_raw`` (64 random bits a draw, turned into
rows or tree positions in compiled code): ``Generator.integers`` alone cost ~3 us of a ~22 us
uniform sample(256)."""

from __future__ import annotations

from typing import Any

import numpy as np

from numba import njit

from relayrl.data.replay.sumtree import SumTree, _apply_priorities, _sample_prioritized

_NOT_TRACKED = np.zeros(0, dtype=bool)  # ``live`` of a buffer without evictions: every row counts
NEGATIVE_IDS = "item ids are never negative: pass the 'index' column of a sample"


@njit(cache=True, nogil=True)
def _uniform_rows(raw, size, rows):
    for q in range(raw.shape[0]):  # top 53 bits scaled to [0, size): bias below 2^-13 for 1e12 rows
        rows[q] = min(np.int64((raw[q] >> np.uint64(11)) * (size / 9007199254740992.0)), size - 1)


def _matching(index: np.ndarray, generation: np.ndarray, live: np.ndarray | None) -> int:
    if len(index) and index.min() < 0:
        raise ValueError(NEGATIVE_IDS)
    rows = index % len(generation)
    keep = generation[rows] == index // len(generation)
    if live is not None:
        keep &= live[rows]
    return int(keep.sum())


def _stratified(tree: SumTree, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One draw from each of n equal slices of the total mass (lower variance than n plain draws):
    the leaves chosen and their values."""
    total = tree.root
    prefix = (np.arange(n) + rng.random(n)) * (total / n)
    return tree.find_with_weights(np.minimum(prefix, total * (1 - 1e-12)))


class UniformSampler:
    """Uniform over live rows. Without evictions it draws integers; with them, a 0/1 sum tree."""

    def __init__(self, capacity: int, track_evictions: bool = False):
        self.tree = SumTree(capacity) if track_evictions else None

    def on_write(self, rows: np.ndarray) -> None:
        if self.tree is not None:
            self.tree.update(rows, 1.0)

    def on_evict(self, rows: np.ndarray) -> None:
        if self.tree is not None:
            self.tree.update(rows, 0.0)

    def sample(self, n: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if self.tree is None:
            rows = np.empty(n, dtype=np.int64)
            _uniform_rows(rng.bit_generator.random_raw(n), size, rows)
        else:
            rows = _stratified(self.tree, n, rng)[0]
        return rows, np.ones(n, dtype=np.float32)

    def update_items(self, index: np.ndarray, priority: np.ndarray, generation: np.ndarray,
                     live: np.ndarray | None) -> int:
        """Uniform sampling ignores priorities; returns how many items are still held."""
        return _matching(index, generation, live)

    def state_dict(self) -> dict[str, Any]:
        return {} if self.tree is None else {"live": self.tree.leaves().copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.tree is not None and "live" in state:
            self.tree.load_leaves(np.asarray(state["live"]))


class PrioritizedSampler:
    """Proportional prioritized replay (Schaul et al.): P(i) = p_i^α / Σ p^α, IS weights (N·P(i))^-β
    normalised by their maximum, β annealed linearly to 1 over ``beta_steps`` sample calls."""

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4, beta_steps: int = 100_000,
                 eps: float = 1e-6):
        self.alpha, self.beta0, self.beta_steps, self.eps = alpha, beta, beta_steps, eps
        self.sum = SumTree(capacity)  # also keeps the smallest positive priority (the largest IS weight)
        self.max_priority = 1.0
        self.calls = 0
        self.live = 0

    @property
    def beta(self) -> float:
        return self.beta0 + (1.0 - self.beta0) * min(1.0, self.calls / max(1, self.beta_steps))

    def on_write(self, rows: np.ndarray) -> None:
        p = self.max_priority ** self.alpha
        self.live += int(np.count_nonzero(self.sum[rows] == 0))
        self.sum.update(rows, p)

    def on_evict(self, rows: np.ndarray) -> None:
        self.live -= int(np.count_nonzero(self.sum[rows] > 0))
        self.sum.update(rows, 0.0)

    def sample(self, n: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        rows, weights = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.float32)
        tree = self.sum
        _sample_prioritized(tree.tree, tree.cum, tree.mins, tree.offsets, tree.capacity,
                            rng.bit_generator.random_raw(n), self.beta, rows, weights)
        self.calls += 1
        return rows, weights

    def update_items(self, index: np.ndarray, priority: np.ndarray, generation: np.ndarray,
                     live: np.ndarray | None) -> int:
        """``update`` for item ids (``generation * capacity + row``), in one compiled pass: items
        overwritten (or evicted) since they were sampled are skipped. Returns how many were applied."""
        tree = self.sum
        applied, largest = _apply_priorities(tree.tree, tree.cum, tree.mins, tree.offsets, tree.capacity, index,
                                             priority, generation, _NOT_TRACKED if live is None else live,
                                             self.eps, self.alpha)
        if applied == -2:
            raise ValueError(NEGATIVE_IDS)
        if applied < 0:
            raise ValueError("priorities must be finite")
        self.max_priority = max(self.max_priority, largest)
        return applied

    def state_dict(self) -> dict[str, Any]:
        return {"priorities": self.sum.leaves().copy(), "max_priority": self.max_priority, "calls": self.calls,
                "live": self.live}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        leaves = np.asarray(state["priorities"], dtype=np.float64)
        self.sum.load_leaves(leaves)
        self.max_priority, self.calls, self.live = float(state["max_priority"]), int(state["calls"]), int(state["live"])
