"""Sampling across replay shards as if they were one buffer.

A request for n items is split over the shards by multinomial draws proportional to each shard's
total sampling mass (its sum of priority^alpha; its size under uniform sampling); each shard draws
its share proportionally to the masses it holds. Item i is then drawn with probability
(T_s / T) * (m_i / T_s) = m_i / T, exactly as from one buffer holding every item. The importance
weights are (N * P(i))^-beta over the global N and T, normalised by the largest possible weight, the
one of the globally smallest mass (Schaul et al.): (m_i / m_min)^-beta, as one buffer's are.

Item ids cross the shard boundary as ``local_id * num_shards + shard_id``: ``route`` turns a
learner's priority update back into one ``UpdatePriority`` per shard.

The totals used for a split are the latest each shard reported (with its last answer or heartbeat):
a request made while priority updates are in flight splits by totals a few updates old, as Ape-X's
do; the weights of the items returned use the totals reported with them.
"""

from __future__ import annotations

import numpy as np

from relayrl.runtime.messages import BatchTrainingData, Heartbeat, UpdatePriority
from relayrl.types import Batch


class ShardedSampling:
    def __init__(self, num_shards: int, prioritized: bool, beta: float = 0.4, beta_steps: int = 100_000,
                 seed: int = 0):
        self.num_shards, self.prioritized = num_shards, prioritized
        self.beta0, self.beta_steps = beta, max(1, beta_steps)
        self.sizes = np.zeros(num_shards, dtype=np.int64)
        self.totals = np.zeros(num_shards, dtype=np.float64)
        self.mins = np.zeros(num_shards, dtype=np.float64)
        self.calls = 0
        self.rng = np.random.default_rng(seed)

    @property
    def beta(self) -> float:
        return self.beta0 + (1.0 - self.beta0) * min(1.0, self.calls / self.beta_steps)

    def size(self) -> int:
        return int(self.sizes.sum())

    def observe(self, report: BatchTrainingData | Heartbeat) -> None:
        """Take a shard's latest size and totals (from an answer, or a heartbeat's counters)."""
        if isinstance(report, BatchTrainingData):
            k, size, total, smallest = report.shard_id, report.size, report.total, report.min_mass
        else:
            c = report.counters
            k, size, total, smallest = report.role_id, int(c["size"]), c["total"], c["min_mass"]
        self.sizes[k], self.totals[k], self.mins[k] = size, total, smallest

    def forget(self, shard_id: int) -> None:
        """A shard lost what it held (restarted empty): until it reports again, it gets no requests."""
        self.sizes[shard_id] = 0
        self.totals[shard_id] = self.mins[shard_id] = 0.0

    def split(self, n: int) -> np.ndarray | None:
        """Items to request from each shard for a sample of n (None: no shard holds anything yet)."""
        total = self.totals.sum()
        if total <= 0:
            return None
        return self.rng.multinomial(n, self.totals / total)

    def merge(self, answers: list[BatchTrainingData]) -> Batch | None:
        """One batch from the shards' answers: global item ids in ``index``, importance weights in
        ``weight`` (ones under uniform sampling). None when every answer is empty."""
        for answer in answers:
            self.observe(answer)
        parts = [a for a in answers if a.batch]
        if not parts:
            return None
        self.calls += 1
        keys = [k for k in parts[0].batch if k not in ("index", "mass")]
        batch = {k: np.concatenate([p.batch[k] for p in parts]) if len(parts) > 1 else np.asarray(parts[0].batch[k])
                 for k in keys}
        batch["index"] = np.concatenate([np.asarray(p.batch["index"]) * self.num_shards + p.shard_id for p in parts])
        mass = np.concatenate([np.asarray(p.batch["mass"]) for p in parts])
        if self.prioritized:
            batch["weight"] = self._weights(mass)
        else:
            batch["weight"] = np.ones(len(mass), dtype=np.float32)
        return batch

    def _weights(self, mass: np.ndarray) -> np.ndarray:
        # (N * m_i / T)^-beta / (N * m_min / T)^-beta: N and T cancel, as in one buffer's kernel
        held = self.mins[(self.sizes > 0) & (self.mins > 0)]
        smallest = min(held.min(), mass.min()) if len(held) else mass.min()
        return ((mass / smallest) ** -self.beta).astype(np.float32)

    def route(self, index: np.ndarray, priority: np.ndarray) -> list[UpdatePriority]:
        """The learner's priority update as one message per shard (global ids back to each shard's)."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        priority = np.asarray(priority, dtype=np.float64).reshape(-1)
        if len(index) != len(priority):
            raise ValueError(f"{len(index)} items but {len(priority)} priorities")
        if len(index) and index.min() < 0:
            raise ValueError("item ids are never negative: pass the 'index' column of a sample")
        shard = index % self.num_shards
        out = []
        for k in np.unique(shard):
            mine = shard == k
            out.append(UpdatePriority(int(k), index[mine] // self.num_shards, priority[mine]))
        return out
