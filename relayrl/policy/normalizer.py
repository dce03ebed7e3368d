"""Running mean and variance (Chan et al.'s parallel Welford update) for observation normalisation."""

from __future__ import annotations

import numpy as np


class RunningMeanStd:
    """Tracks the mean and variance of a stream of arrays of shape ``shape``.

    Statistics are float64 and updated from whole batches at once. Unlike roadrunner's Welford
    update, the old mean is never aliased: ``update`` builds new arrays and then assigns them.
    """

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-8, clip: float = 10.0):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = 0.0
        self.epsilon = epsilon
        self.clip = clip

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64).reshape(-1, *self.mean.shape)
        if x.shape[0]:
            self.merge(x.shape[0], x.mean(axis=0), x.var(axis=0))

    def merge(self, n: float, batch_mean: np.ndarray, batch_var: np.ndarray) -> None:
        """Fold in the moments (count, mean, population variance) of data seen elsewhere, e.g. by a
        rollout worker: the result equals the statistics of both data sets pooled (Chan et al.)."""
        if n <= 0:
            return
        total = self.count + n
        delta = batch_mean - self.mean
        new_mean = self.mean + delta * (n / total)
        m2 = self.var * self.count + batch_var * n + delta**2 * (self.count * n / total)
        self.mean, self.var, self.count = new_mean, m2 / total, total

    def merge_state(self, state: dict[str, np.ndarray]) -> None:
        """``merge`` of another RunningMeanStd's ``state_dict()``."""
        self.merge(float(np.asarray(state["count"])), np.asarray(state["mean"], np.float64),
                   np.asarray(state["var"], np.float64))

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var + self.epsilon)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        out = (x - self.mean) / self.std
        return np.clip(out, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": np.array(self.count)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        mean = np.asarray(state["mean"], dtype=np.float64)
        if mean.shape != self.mean.shape:
            raise ValueError(f"normalizer shape {mean.shape} does not match {self.mean.shape}")
        self.mean = mean.copy()
        self.var = np.asarray(state["var"], dtype=np.float64).copy()
        self.count = float(np.asarray(state["count"]))
