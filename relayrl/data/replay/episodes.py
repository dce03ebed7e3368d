"""EpisodeBuffer: whole episodes in one ring of transitions, sampled as episodes or fixed-length sequences
(for recurrent learners and hindsight relabelling).

Transitions arrive as vector steps (a batch with an ``env_id`` column and ``terminated``/``truncated``);
each env's steps are held until its episode ends, then the episode is written contiguously. When the
ring wraps, the episodes it overwrites are dropped whole: a sampled sequence never mixes episodes.

    buffer = EpisodeBuffer(100_000)
    buffer.add(step_batch)                      # any number of rows, any envs
    seq = buffer.sample_sequences(32, 16)       # [32, 16, ...] arrays + "mask" [32, 16]
    eps = buffer.sample_episodes(8)             # padded to the longest, + "mask" and "length"
"""

from __future__ import annotations

from collections import deque

import numpy as np

from relayrl.data.replay.storage import ArrayStorage
from relayrl.types import Batch


class EpisodeBuffer:
    def __init__(self, capacity: int, seed: int | None = None):
        self.storage = ArrayStorage(capacity)
        self.episodes: deque[tuple[int, int]] = deque()  # (first row, length), oldest first
        self.pending: dict[int, list[Batch]] = {}  # env id -> its rows of the unfinished episode
        self.rng = np.random.default_rng(seed)

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    def __len__(self) -> int:
        """Transitions held in complete episodes."""
        return sum(length for _, length in self.episodes)

    def add(self, batch: Batch) -> int:
        """Add vector-step rows; returns how many episodes were completed and stored."""
        env_ids = np.asarray(batch["env_id"])
        done = np.asarray(batch["terminated"]) | np.asarray(batch["truncated"])
        stored = 0
        for row in range(len(env_ids)):
            env = int(env_ids[row])
            self.pending.setdefault(env, []).append({k: np.asarray(v)[row:row + 1] for k, v in batch.items()})
            if done[row]:
                rows = self.pending.pop(env)
                self.add_episode({k: np.concatenate([r[k] for r in rows]) for k in rows[0]})
                stored += 1
        return stored

    def add_episode(self, episode: Batch) -> None:
        length = len(next(iter(episode.values())))
        if length > self.capacity:
            raise ValueError(f"an episode of {length} steps does not fit a buffer of {self.capacity} transitions")
        start = self.storage.pos
        overwritten = set(((start + np.arange(length)) % self.capacity).tolist()) if self.episodes else set()
        while self.episodes and self._rows(*self.episodes[0]) & overwritten:
            self.episodes.popleft()
        self.storage.add(episode)
        self.episodes.append((start, length))

    def _rows(self, start: int, length: int) -> set[int]:
        return set(((start + np.arange(length)) % self.capacity).tolist())

    def _gather(self, starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray, width: int) -> Batch:
        steps = np.arange(width)
        mask = steps[None, :] < (lengths - offsets)[:, None]
        rows = (starts[:, None] + offsets[:, None] + np.minimum(steps[None, :], (lengths - offsets - 1)[:, None]))
        batch = self.storage.get(rows % self.capacity)
        for key, value in batch.items():  # padding repeats the last real step; zero it for clarity
            value[~mask] = 0
        batch["mask"] = mask
        return batch

    def sample_sequences(self, n: int, length: int) -> Batch:
        """n sequences of ``length`` steps, starting uniformly over all stored steps; a sequence that
        reaches its episode's end is padded (``mask`` False on padding)."""
        if not self.episodes:
            raise ValueError("the episode buffer holds no complete episode yet")
        starts, lengths = (np.array(x) for x in zip(*self.episodes))
        picks = self.rng.choice(len(starts), size=n, p=lengths / lengths.sum())
        offsets = (self.rng.random(n) * lengths[picks]).astype(np.int64)
        batch = self._gather(starts[picks], lengths[picks], offsets, length)
        batch["episode"] = picks
        return batch

    def sample_episodes(self, n: int) -> Batch:
        """n whole episodes (uniformly), padded to the longest, with ``mask`` and ``length``."""
        if not self.episodes:
            raise ValueError("the episode buffer holds no complete episode yet")
        starts, lengths = (np.array(x) for x in zip(*self.episodes))
        picks = self.rng.integers(0, len(starts), n)
        batch = self._gather(starts[picks], lengths[picks], np.zeros(n, np.int64), int(lengths[picks].max()))
        batch["length"] = lengths[picks]
        return batch
