"""FrameStorage: ArrayStorage's ring for transitions of image observations, with every frame of
``obs`` and ``next_obs`` held once in a FrameRing (frames.py) and the records keeping slot numbers.

An observation [k, H, W] (channel-first, k < W: a frame stack, or an image's channels) is k frames
[H, W]; any other image is one frame. For Atari's [4, 84, 84] uint8 a transition then costs one
new 7 KB frame instead of 56 KB (the previous observation's newest three frames and the
next observation's shared with neighbours in the stream), and ``get`` returns exactly the arrays
that were added. ``ReplayBuffer(layout="frames")`` uses it; ``choose_layout`` picks it for image
observations (three or more dimensions) of 4 KB or more as stored.

Items are numbered by a serial (the n-th row ever written; its item id is ``serial + capacity``).
When frames do not repeat (observations that share nothing), the ring runs out of free slots before
the records do and the oldest items are dropped early: ``pop_dropped`` hands their rows to the
buffer, which stops sampling them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from relayrl.data.replay.frames import FrameRing
from relayrl.data.replay.storage import ArrayStorage, Spec
from relayrl.errors import ConfigError
from relayrl.types import Batch, batch_size

FRAME_KEYS = ("obs", "next_obs")
SLACK = 0.25  # frame slots beyond one per item: one more per episode start (episodes of 4+ steps)


def frames_of(shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """(frames per observation, frame shape) for an observation of ``shape``."""
    if len(shape) >= 3 and shape[0] < shape[-1]:
        return shape[0], tuple(shape[1:])
    return 1, tuple(shape)


FRAMES_MIN_BYTES = 4096  # below this an observation is cheaper to copy twice than to intern


def choose_layout(obs_shape: tuple[int, ...] | None, itemsize: int = 1) -> str:
    """"frames" for image observations (three or more dimensions) of at least ``FRAMES_MIN_BYTES``, else
    "plain" (``itemsize``: of the stored dtype). Small images (MinAtar's [10, 10, C] boolean planes, stored as
    float32: 400 bytes a channel, up to 10 channels) cost little memory either way, and the plain record adds and
    samples them faster (no interning, no indirection)."""
    if obs_shape is None or len(obs_shape) < 3:
        return "plain"
    return "frames" if int(np.prod(obs_shape)) * itemsize >= FRAMES_MIN_BYTES else "plain"


class FrameStorage:
    """Rows ``0 .. capacity - 1`` in ring order like ArrayStorage, whose interface it has; ``obs`` and
    ``next_obs`` (both, with the same shape and dtype) are kept as frame slots.

    Args:
        capacity: items (transitions) kept.
        slots: frames the ring holds (default: capacity * 1.25 + headroom for a few batches).
    """

    def __init__(self, capacity: int, slots: int | None = None):
        self.records = ArrayStorage(capacity)
        self.requested_slots = slots
        self.ring: FrameRing | None = None
        self.obs_shape: tuple[int, ...] = ()
        self.k = 1
        self.written = 0  # items ever written; the next item's serial
        self.floor = 0  # items below this serial were dropped for want of frame slots
        self._dropped: list[np.ndarray] = []

    # ---- ArrayStorage's interface
    @property
    def capacity(self) -> int:
        return self.records.capacity

    @property
    def pos(self) -> int:
        return self.records.pos

    @property
    def size(self) -> int:
        return self.records.size

    @property
    def generation(self) -> np.ndarray:
        return self.records.generation

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The fields kept in the records (``obs_slots`` and ``next_obs_slots`` in place of observations)."""
        return self.records.arrays

    @property
    def spec(self) -> Spec:
        spec = {k: v for k, v in self.records.spec.items() if not k.endswith("_slots")}
        if self.ring is not None:
            spec.update({key: (self.obs_shape, self.ring.frames.dtype) for key in FRAME_KEYS})
        return spec

    @property
    def nbytes(self) -> int:
        """Bytes held by the records, the frames and the slot bookkeeping."""
        ring = 0 if self.ring is None else self.ring.frames.nbytes + self.ring.user.nbytes + self.ring.fingerprint.nbytes
        return self.records.data.nbytes + self.records.generation.nbytes + ring

    def oldest_rows(self) -> np.ndarray:
        return self.records.oldest_rows()

    def _allocate(self, shape: tuple[int, ...], dtype: np.dtype, slots: int | None = None) -> None:
        self.obs_shape = tuple(shape)
        self.k, frame = frames_of(self.obs_shape)
        default = self.capacity + int(self.capacity * SLACK) + 4 * 2 * self.k * 64
        self.ring = FrameRing(slots or self.requested_slots or default, frame, dtype)
        if self.ring.slots < 4 * self.k:
            raise ConfigError(f"a frame ring of {self.ring.slots} slots is too small for observations of "
                              f"{self.k} frames: it needs at least {4 * self.k}")
        # rows interned at a time: a chunk's 2k frames per row must fit half the ring (FrameRing.intern)
        self.chunk_rows = max(1, min(64, self.ring.slots // (4 * self.k)))

    def add(self, batch: Batch) -> np.ndarray:
        """Write every row of ``batch``; returns the rows written (in order, wrapping around)."""
        n = batch_size(batch)
        missing = [key for key in FRAME_KEYS if key not in batch]
        if missing:
            raise ValueError(f"the frame layout stores transitions with both 'obs' and 'next_obs': {missing} missing")
        obs, nxt = np.asarray(batch["obs"]), np.asarray(batch["next_obs"])
        if self.ring is None:
            self._allocate(obs.shape[1:], obs.dtype)
        for key, value in (("obs", obs), ("next_obs", nxt)):
            if value.shape[1:] != self.obs_shape or value.dtype != self.ring.frames.dtype:
                raise ValueError(f"batch[{key!r}] has rows of {value.shape[1:]} {value.dtype}, the buffer stores "
                                 f"{self.obs_shape} {self.ring.frames.dtype}")
        if n > self.capacity:  # only the newest capacity rows survive
            batch = {k: np.asarray(v)[n - self.capacity:] for k, v in batch.items()}
            obs, nxt, n = obs[n - self.capacity:], nxt[n - self.capacity:], self.capacity
        rest = {k: v for k, v in batch.items() if k not in FRAME_KEYS}
        rows = []
        step = self.chunk_rows
        for start in range(0, n, step):
            stop = min(n, start + step)
            rows.append(self._add_chunk(obs[start:stop], nxt[start:stop],
                                        {k: np.asarray(v)[start:stop] for k, v in rest.items()}))
        return np.concatenate(rows) if rows else np.zeros(0, np.int64)

    def _add_chunk(self, obs: np.ndarray, nxt: np.ndarray, rest: Batch) -> np.ndarray:
        n, k, frame = len(obs), self.k, self.ring.frames.shape[1:]
        frames = np.concatenate([obs.reshape(n, k, *frame), nxt.reshape(n, k, *frame)], axis=1)
        users = np.repeat(np.arange(self.written, self.written + n), 2 * k)
        surviving = self.written + n - self.capacity  # items below it are overwritten by this chunk
        before = max(self.floor, surviving)
        slots, floor = self.ring.intern(frames.reshape(n * 2 * k, *frame), users, before)
        if floor > before:  # items dropped early, still in the ring, not overwritten by this chunk
            self._dropped.append(np.arange(before, floor) % self.capacity)
        self.floor = max(self.floor, floor)
        slots = slots.astype(np.int32).reshape(n, 2 * k)
        rows = self.records.add({**rest, "obs_slots": slots[:, :k], "next_obs_slots": slots[:, k:]})
        self.written += n
        return rows

    def pop_dropped(self) -> np.ndarray:
        """Rows of items dropped early since the last call (the buffer stops sampling them)."""
        rows = np.concatenate(self._dropped) if self._dropped else np.zeros(0, np.int64)
        self._dropped = []
        return rows

    def get(self, rows: np.ndarray) -> Batch:
        """Copies of ``rows`` (any shape), observations rebuilt from their frames."""
        batch = self.records.get(rows)
        lead = np.shape(rows)
        for key in FRAME_KEYS:
            slots = batch.pop(f"{key}_slots")
            batch[key] = self.ring.frames[slots].reshape(*lead, *self.obs_shape)
        return batch

    def gather(self, rows: np.ndarray) -> tuple[Batch, np.ndarray]:
        """ArrayStorage.gather: the records as views of one fresh block, observations rebuilt from
        their frames, and the item ids."""
        batch, ids = self.records.gather(rows)
        for key in FRAME_KEYS:
            slots = batch.pop(f"{key}_slots")
            batch[key] = self.ring.frames[slots].reshape(len(rows), *self.obs_shape)
        return batch, ids

    # ---- persistence
    def state_dict(self) -> dict[str, Any]:
        if self.ring is None:
            return {"layout": "frames", "records": self.records.state_dict()}
        return {"layout": "frames", "records": self.records.state_dict(), "frames": self.ring.frames,
                "user": self.ring.user, "ring_pos": self.ring.pos, "obs_shape": list(self.obs_shape),
                "written": self.written, "floor": self.floor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("layout") != "frames":
            raise ValueError("the file holds a replay buffer of the plain layout, this one keeps image "
                             "frames once (layout 'frames'): start the replay afresh or load it into a plain buffer")
        if "frames" in state:
            frames = np.asarray(state["frames"])
            shape = tuple(int(d) for d in state["obs_shape"])
            if self.ring is not None and (shape != self.obs_shape or frames.dtype != self.ring.frames.dtype):
                raise ValueError(f"saved observations are {shape} {frames.dtype}, this buffer stores "
                                 f"{self.obs_shape} {self.ring.frames.dtype}")
            self._allocate(shape, frames.dtype, slots=len(frames))
            self.ring.frames[:] = frames
            self.ring.user[:] = np.asarray(state["user"])
            self.ring.pos = int(state["ring_pos"])
            self.written, self.floor = int(state["written"]), int(state["floor"])
            self.ring.reindex(max(self.floor, self.written - self.capacity))
        self.records.load_state_dict(state["records"])
