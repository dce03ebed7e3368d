"""A replay shard: the TrajectoryManager role of the actor model, one of the replay service's parts.

A shard holds a ``ReplayBuffer`` and answers messages (runtime/messages.py); it does not know
where it runs (a Ray actor: runtime/service.py, or the learner's own process in tests)::

    shard = ReplayShard(0, ShardOptions(capacity=100_000, sampler="prioritized"))
    shard.insert(InsertTransitions(...))               # rows stored, or a refusal naming the problem
    data = shard.sample(SampleBatch(request_id=1, batch_size=64))   # BatchTrainingData
    shard.update_priority(UpdatePriority(0, data.batch["index"], td_errors))
    shard.heartbeat()                                  # Heartbeat with its counters

Every chunk is checked against the shard's schema: the columns the learner knows in advance
(``ShardOptions.columns``: obs, next_obs and action from its spaces), and every column of the first
chunk it stored: a chunk that does not fit is refused with one message naming the
columns and counted, never stored. A sample request that comes before the shard holds ``min_size``
items gets an empty answer with the reason. Priority updates for items overwritten or evicted since
they were sampled are skipped and counted (``priority_skipped``). ``snapshot()`` writes the buffer to
``snapshot_path`` (safetensors, no pickle) and a shard built with that path restores from it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from relayrl.data.dtypes import store_transitions
from relayrl.data.replay import ReplayBuffer
from relayrl.data.replay.ratelimit import RateLimiter
from relayrl.errors import CheckpointError
from relayrl.runtime.messages import BatchTrainingData, Heartbeat, InsertTransitions, SampleBatch, Stop, UpdatePriority
from relayrl.types import Batch

Schema = dict[str, tuple[str, tuple[int, ...]]]  # column -> (dtype, row shape)


@dataclass(frozen=True)
class ShardOptions:
    capacity: int
    sampler: str = "uniform"  # or "prioritized"
    alpha: float = 0.6
    layout: str = "plain"
    max_use: int | None = None
    seed: int = 0
    min_size: int = 1  # items held before a sample request is answered
    columns: tuple[tuple[str, str, tuple[int, ...]], ...] = ()  # (column, dtype, row shape) known in advance
    max_staleness: int | None = None  # evict rows this many versions behind the version a sample request carries
    samples_per_insert: float | None = None  # this shard's share of the rate limiter (``accepts``): the ratio,
    spi_min_size: int = 0  # min_size / shards
    spi_error_buffer: float = 0.0  # error buffer / shards


def schema_of(batch: Batch) -> Schema:
    return {k: (np.asarray(v).dtype.str, tuple(np.shape(v)[1:])) for k, v in batch.items()}


def schema_problem(expected: Schema, batch: Batch, partial: bool = False) -> str:
    """'' when ``batch`` fits ``expected``, else what differs (for the refusal message). ``partial``:
    ``expected`` names some of the columns (others may come too)."""
    got = schema_of(batch)
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    if missing or (extra and not partial):
        return f"columns differ (missing {missing}, unexpected {extra})"
    wrong = [f"{k}: {np.dtype(got[k][0])}{list(got[k][1])} instead of {np.dtype(v[0])}{list(v[1])}"
             for k, v in expected.items() if got[k] != v]
    return "; ".join(wrong)


class ReplayShard:
    def __init__(self, shard_id: int, options: ShardOptions, snapshot_path: str | None = None):
        self.shard_id, self.options = shard_id, options
        extra = {"alpha": options.alpha} if options.sampler == "prioritized" else {}
        self.buffer = ReplayBuffer(options.capacity, sampler=options.sampler, max_use=options.max_use,
                                   max_staleness=options.max_staleness, seed=options.seed + 7919 * shard_id,
                                   layout=options.layout, **extra)
        self.known: Schema = {k: (np.dtype(d).str, tuple(s)) for k, d, s in options.columns}
        self.schema: Schema | None = None  # every column, from the first chunk stored
        self.snapshot_path = Path(snapshot_path) if snapshot_path else None
        self.counters = {"inserted": 0, "chunks": 0, "refused_chunks": 0, "sampled": 0, "requests": 0,
                         "early_requests": 0, "priority_updates": 0, "priority_skipped": 0, "snapshots": 0,
                         "restored": 0}
        self.refusals: list[str] = []  # reasons not yet collected (``take_refusals``)
        self.limiter = (None if options.samples_per_insert is None else
                        RateLimiter(options.samples_per_insert, options.spi_min_size, options.spi_error_buffer))
        if self.snapshot_path is not None and self.snapshot_path.is_file():
            try:
                self.restore()
            except CheckpointError as exc:  # start empty: what the snapshot held is counted as lost
                self.refusals.append(f"replay shard {shard_id} started empty: its snapshot cannot be restored ({exc})")

    # ---- InsertTransitions
    def insert(self, msg: InsertTransitions) -> int:
        """Store a chunk's transitions; returns the rows stored (0 for a refused or empty chunk)."""
        if not msg.batch:
            return 0
        batch = store_transitions(dict(msg.batch))
        if self.options.max_staleness is not None and "version" not in batch:  # the version that collected them
            batch["version"] = np.full(len(next(iter(batch.values()))), msg.version, np.int64)
        problem = (schema_problem(self.known, batch, partial=True) if self.schema is None
                   else schema_problem(self.schema, batch))
        if problem:
            self.counters["refused_chunks"] += 1
            self.refusals.append(f"replay shard {self.shard_id} refused chunk {msg.seq} of worker {msg.worker_id}: "
                                 f"{problem}. Every worker must run the learner's env and config (the same env id, "
                                 "wrappers and relayrl version)")
            return 0
        if self.schema is None:
            self.schema = schema_of(batch)
        self.buffer.add(batch)
        n = len(next(iter(batch.values())))
        if self.limiter is not None:
            self.limiter.insert(n)
        self.counters["inserted"] += n
        self.counters["chunks"] += 1
        return n

    def accepts(self) -> bool:
        """Whether the next chunk may be stored now under the rate limiter (always without one). A chunk is
        stored whole: it may take this shard's diff past its error buffer by one chunk's rows. A shard that
        does not accept leaves its chunks in its channel, so its workers block (counted: insert waits)."""
        if self.limiter is None:
            return True
        ok = self.limiter.can_insert()
        (self.limiter.resume if ok else self.limiter.wait)("insert", time.monotonic())
        return ok

    def take_refusals(self) -> list[str]:
        out, self.refusals = self.refusals, []
        return out

    # ---- SampleBatch -> BatchTrainingData
    def sample(self, request: SampleBatch) -> BatchTrainingData:
        self.counters["requests"] += 1
        size = len(self.buffer)
        if size < max(1, self.options.min_size):
            self.counters["early_requests"] += 1
            return self._answer(request, {}, f"replay shard {self.shard_id} holds {size} of the "
                                            f"{self.options.min_size} items it needs before sampling")
        batch = self.buffer.sample(request.batch_size,
                                   version=request.version if self.options.max_staleness is not None else None)
        if batch is None:  # everything evicted (max_use, max_staleness)
            self.counters["early_requests"] += 1
            return self._answer(request, {}, f"replay shard {self.shard_id} has nothing left to sample")
        batch.pop("weight")  # importance weights are the learner's to compute, over every shard
        batch["mass"] = self._mass(batch["index"] % self.buffer.capacity)
        self.counters["sampled"] += request.batch_size
        if self.limiter is not None:
            self.limiter.sample(request.batch_size)
        return self._answer(request, batch)

    def _mass(self, rows: np.ndarray) -> np.ndarray:
        sampler = self.buffer.sampler
        if self.options.sampler == "prioritized":
            return np.asarray(sampler.sum[rows], dtype=np.float64)
        return np.ones(len(rows), dtype=np.float64)

    def total(self) -> tuple[float, float]:
        """(sum of the sampling masses, smallest positive mass) of the items held."""
        if self.options.sampler == "prioritized":
            tree = self.buffer.sampler.sum
            return float(tree.root), float(tree.min_positive) if tree.root > 0 else 0.0
        size = len(self.buffer)
        return float(size), 1.0 if size else 0.0

    def _answer(self, request: SampleBatch, batch: Batch, reason: str = "") -> BatchTrainingData:
        total, smallest = self.total()
        return BatchTrainingData(request.request_id, self.shard_id, batch, len(self.buffer), total, smallest, reason)

    # ---- UpdatePriority
    def update_priority(self, msg: UpdatePriority) -> int:
        applied = self.buffer.update_priorities(np.asarray(msg.index), np.asarray(msg.priority))
        self.counters["priority_updates"] += applied
        self.counters["priority_skipped"] += len(msg.index) - applied
        return applied

    # ---- Heartbeat
    def heartbeat(self) -> Heartbeat:
        total, smallest = self.total()
        counters = {**{k: float(v) for k, v in self.counters.items()}, "size": float(len(self.buffer)),
                    "capacity": float(self.buffer.capacity),
                    "total": total, "min_mass": smallest, "evicted": float(self.buffer.evicted)}
        if self.limiter is not None:
            waits = self.limiter.stats(time.monotonic())
            counters["insert_waits"], counters["insert_wait_s"] = waits["limiter/insert_waits"], waits["limiter/insert_wait_s"]
        return Heartbeat("shard", self.shard_id, time.time(), counters)

    def beat(self) -> tuple[Heartbeat, list[str]]:
        """The heartbeat and the refusals since the last one (what the orchestrator polls)."""
        return self.heartbeat(), self.take_refusals()

    # ---- Stop
    def stop(self, msg: Stop) -> int:
        """Nothing to flush (snapshots are the learner's to ask for, with its checkpoints): answer at
        once, so the sender knows this shard is idle and may go; returns the items held."""
        return len(self.buffer)

    # ---- snapshots
    def snapshot_to(self, path: str) -> int:
        self.snapshot_path = Path(path)
        return self.snapshot()

    def snapshot(self) -> int:
        """Write the buffer to ``snapshot_path``; returns the items written (0 without a path)."""
        if self.snapshot_path is None:
            return 0
        self.buffer.save(self.snapshot_path)
        self.counters["snapshots"] += 1
        return len(self.buffer)

    def restore(self) -> None:
        self.buffer.load(self.snapshot_path)
        if self.schema is None and self.options.layout == "plain" and self.buffer.storage.arrays:
            self.schema = {k: (a.dtype.str, tuple(a.shape[1:])) for k, a in self.buffer.storage.arrays.items()}
        self.counters["restored"] = len(self.buffer)

    def info(self) -> dict[str, Any]:
        return {"shard_id": self.shard_id, "size": len(self.buffer), "capacity": self.buffer.capacity, "pid": os.getpid()}
