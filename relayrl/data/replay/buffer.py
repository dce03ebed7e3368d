"""ReplayBuffer: ArrayStorage + a sampler, with DI-engine's use-count and staleness eviction,
a throughput monitor, save/load without pickle, and offline dataset preloading.

    buffer = ReplayBuffer(1_000_000, sampler="prioritized")
    buffer.add(batch)                       # dict of [n, ...] arrays
    sample = buffer.sample(256)             # + "index" (item ids) and "weight" (IS weights)
    buffer.update_priorities(sample["index"], td_errors)

``index`` values are item ids (``generation * capacity + row``): an update for an item that was
overwritten since it was sampled is ignored.

A sample owns its memory: the sampled records are copied once, into one block per sample, and each
field is a view into that block (strided by the record's size, not C-contiguous). Nothing the buffer
does later (adds, other samples) changes a sample already returned, and writing into a sample leaves
the buffer as it was. ``to_tensor`` (data/dtypes.py) turns a float32 field into a tensor without a
copy; call ``np.ascontiguousarray`` on a field where contiguous memory is needed.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from relayrl.data.replay.base import Replay
from relayrl.data.replay.framestorage import FrameStorage
from relayrl.data.replay.sampler import PrioritizedSampler, UniformSampler
from relayrl.data.replay.storage import ArrayStorage
from relayrl.errors import CheckpointError, ConfigError
from relayrl.types import Batch


class ThroughputMonitor:
    """Push and sample rates (items/s), exponentially averaged over ``window_s``."""

    def __init__(self, window_s: float = 30.0):
        self.window_s = window_s
        self.pushed = self.sampled = 0
        self._rates = {"push": 0.0, "sample": 0.0}
        self._last = {"push": time.monotonic(), "sample": time.monotonic()}

    def record(self, kind: str, n: int) -> None:
        now = time.monotonic()
        dt = max(now - self._last[kind], 1e-6)
        decay = math.exp(-dt / self.window_s)
        self._rates[kind] = decay * self._rates[kind] + (1 - decay) * (n / dt)
        self._last[kind] = now
        if kind == "push":
            self.pushed += n
        else:
            self.sampled += n

    def stats(self) -> dict[str, float]:
        return {"replay/push_per_s": self._rates["push"], "replay/sample_per_s": self._rates["sample"],
                "replay/pushed": float(self.pushed), "replay/sampled": float(self.sampled)}


_LOADED: set[tuple[str, str]] = set()


def _load_kernels(sampler: str, layout: str) -> None:
    """Run a tiny buffer of this kind once per process, so that numba loads (or, on a fresh machine,
    compiles) the gather and sum-tree kernels when a buffer is built, not on its first sample inside a
    run's timed training (~0.5 s for uniform, ~0.8 s for prioritized from numba's cache here)."""
    if (sampler, layout) in _LOADED:
        return
    _LOADED.add((sampler, layout))
    tiny = ReplayBuffer(2, sampler=sampler, layout=layout, seed=0)
    obs = np.zeros((2, 4, 32, 32) if layout == "frames" else (2, 1), np.uint8)
    tiny.add({"obs": obs, "next_obs": obs, "reward": np.zeros(2, np.float32)})
    sample = tiny.sample(2)
    if sampler == "prioritized":
        tiny.update_priorities(sample["index"], np.ones(2))


class ReplayBuffer(Replay):
    """Args:
        capacity: rows kept; the oldest are overwritten.
        sampler: "uniform" or "prioritized" (then ``alpha``, ``beta``, ``beta_steps``, ``eps``).
        max_use: evict an item once it has been sampled this many times (None: never).
        max_staleness: evict items whose ``version`` is this many versions behind the learner's
            (``sample(n, version=...)``); batches must then carry a ``version`` column.
        seed: seeds the sampling generator.
        layout: "plain" (one record per transition, every field in it) or "frames" (image
            observations' frames held once and shared: framestorage.py; ``choose_layout`` picks it
            for images). With "frames" the buffer tracks live items, as it may drop the oldest early.
        frame_slots: frames the "frames" layout holds (default: 1.25 per item).
    """

    def __init__(self, capacity: int, *, sampler: str = "uniform", max_use: int | None = None,
                 max_staleness: int | None = None, seed: int | None = None, layout: str = "plain",
                 frame_slots: int | None = None, **sampler_options: Any):
        if layout == "plain":
            self.storage: ArrayStorage | FrameStorage = ArrayStorage(capacity)
        elif layout == "frames":
            self.storage = FrameStorage(capacity, slots=frame_slots)
        else:
            raise ConfigError(f"unknown replay layout {layout!r}: use 'plain' or 'frames'")
        self.layout = layout
        evicting = max_use is not None or max_staleness is not None or layout == "frames"
        if sampler == "uniform":
            if sampler_options:
                raise ConfigError(f"options {sorted(sampler_options)} need sampler='prioritized'")
            self.sampler: UniformSampler | PrioritizedSampler = UniformSampler(capacity, track_evictions=evicting)
        elif sampler == "prioritized":
            self.sampler = PrioritizedSampler(capacity, **sampler_options)
        else:
            raise ConfigError(f"unknown replay sampler {sampler!r}: use 'uniform' or 'prioritized'")
        if max_use is not None and max_use < 1:
            raise ConfigError(f"max_use must be at least 1, got {max_use}")
        self.max_use, self.max_staleness = max_use, max_staleness
        self.use_count = np.zeros(capacity, dtype=np.int64) if max_use is not None else None
        self.live = np.zeros(capacity, dtype=bool) if evicting else None
        self.live_count = 0  # live.sum(), kept as rows come and go (summing 1M flags per sample cost ~50 us)
        self.rng = np.random.default_rng(seed)
        self.monitor = ThroughputMonitor()
        self.evicted = 0
        _load_kernels(sampler, layout)

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    def __len__(self) -> int:
        return self.storage.size if self.live is None else self.live_count

    def add(self, batch: Batch) -> np.ndarray:
        if self.max_staleness is not None and "version" not in batch:
            raise ValueError("max_staleness needs a 'version' column in every batch added")
        rows = self.storage.add(batch)
        self.sampler.on_write(rows)
        if self.use_count is not None:
            self.use_count[rows] = 0
        if self.live is not None:
            self.live_count += len(rows) - int(np.count_nonzero(self.live[rows]))
            self.live[rows] = True
        if isinstance(self.storage, FrameStorage):
            self._evict(self.storage.pop_dropped())
        self.monitor.record("push", len(rows))
        return self.storage.generation[rows] * self.capacity + rows

    def sample(self, n: int, version: int | None = None) -> Batch | None:
        """``n`` items (with ``index`` and ``weight``), or None when nothing is left to sample."""
        if self.max_staleness is not None:
            if version is None:
                raise ValueError("this buffer evicts stale items: pass sample(n, version=learner_version)")
            self._evict_stale(version)
        if len(self) == 0:
            return None
        rows, weights = self.sampler.sample(n, self.storage.size, self.rng)
        batch, ids = self.storage.gather(rows)
        batch["index"], batch["weight"] = ids, weights
        if self.use_count is not None:
            np.add.at(self.use_count, rows, 1)
            worn = np.unique(rows[self.use_count[rows] >= self.max_use])
            self._evict(worn)
        self.monitor.record("sample", n)
        return batch

    def update_priorities(self, index: np.ndarray, priority: np.ndarray) -> int:
        """Set priorities of sampled items; returns how many were applied (overwritten or evicted
        items are skipped)."""
        index = np.ascontiguousarray(index, dtype=np.int64).reshape(-1)
        priority = np.ascontiguousarray(priority, dtype=np.float64).reshape(-1)
        if len(priority) != len(index):
            raise ValueError(f"{len(index)} items but {len(priority)} priorities")
        return self.sampler.update_items(index, priority, self.storage.generation, self.live)

    def _evict(self, rows: np.ndarray) -> None:
        rows = rows[self.live[rows]]
        if len(rows):
            self.live[rows] = False
            self.live_count -= len(rows)
            self.sampler.on_evict(rows)
            self.evicted += len(rows)

    def _evict_stale(self, version: int) -> None:
        order = self.storage.oldest_rows()
        stale = version - self.storage.arrays["version"][order].reshape(len(order), -1)[:, 0] >= self.max_staleness
        self._evict(order[stale])

    def stats(self) -> dict[str, float]:
        return {**self.monitor.stats(), "replay/size": float(len(self)), "replay/evicted": float(self.evicted)}

    # ---- persistence (safetensors + JSON, never pickle)
    def state_dict(self) -> dict[str, Any]:
        state = {"storage": self.storage.state_dict(), "sampler": self.sampler.state_dict(),
                 "rng": self.rng.bit_generator.state, "evicted": self.evicted}
        if self.use_count is not None:
            state["use_count"] = self.use_count.copy()
        if self.live is not None:
            state["live"] = self.live.copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.storage.load_state_dict(state["storage"])
        self.sampler.load_state_dict(state["sampler"])
        self.rng.bit_generator.state = state["rng"]
        self.evicted = int(state["evicted"])
        if self.use_count is not None:
            self.use_count = np.asarray(state["use_count"]).copy()
        if self.live is not None:
            self.live = np.asarray(state["live"]).copy()
            self.live_count = int(self.live.sum())

    def save(self, path: str | Path) -> Path:
        from relayrl.io.checkpoint import save_checkpoint

        return save_checkpoint(Path(path), self.state_dict(), {"kind": "replay_buffer", "capacity": self.capacity,
                                                               "layout": self.layout})

    def load(self, path: str | Path) -> None:
        from relayrl.io.checkpoint import load_checkpoint

        ckpt = load_checkpoint(path)
        if ckpt.meta.get("kind") != "replay_buffer":
            raise CheckpointError(f"{str(ckpt.path)!r} is not a replay buffer file")
        saved = ckpt.meta.get("layout", "plain")
        if saved != self.layout:
            raise CheckpointError(f"replay buffer file {str(ckpt.path)!r} has the {saved!r} layout, this buffer the "
                                  f"{self.layout!r} one (images keep frames once): start the replay afresh "
                                  "(move the file away) or load it into a buffer of its layout")
        try:
            self.load_state_dict(ckpt.state)
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(f"replay buffer file {str(ckpt.path)!r} does not fit this buffer: {exc}") from None

    def load_dataset(self, path: str | Path) -> int:
        """Append an offline dataset (TMRL's ``dataset_path``): an ``.npz`` or ``.safetensors`` file of
        equally long named arrays. Returns the number of rows added. Never unpickles."""
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"dataset {str(path)!r} not found")
        try:
            if path.suffix == ".npz":
                with np.load(path, allow_pickle=False) as data:
                    arrays = {k: data[k] for k in data.files}
            else:
                from safetensors.numpy import load_file

                arrays = load_file(str(path))
            self.add(arrays)
        except (ValueError, OSError, KeyError) as exc:
            raise CheckpointError(f"dataset {str(path)!r} cannot be loaded into this buffer: {exc}") from None
        return len(next(iter(arrays.values())))
