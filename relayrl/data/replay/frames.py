"""FrameRing: image frames stored once and shared by reference, found again by their content.

A transition of an image env holds ``obs`` and ``next_obs``, and with a frame stack each holds k
frames of which k - 1 are also in the previous observation: stored as given, one Atari transition
([4, 84, 84] uint8 twice) is 56 KB. In a stream of steps only one frame per step is new, so the
ring stores each distinct frame once and a transition keeps k + k slot numbers.

Frames are matched by content, not by which env or step they came from: a 64-bit fingerprint finds
a candidate slot and the bytes are compared before it is shared. So sharing is exact whatever the
source (local envs, workers, the relay, n-step transitions, envs interleaved, episode ends, the
ring's wrap), and a stack rebuilt from slots is byte for byte the stack the env produced (the reset
padding of FrameStackObservation included): nothing here knows how stacks are made.

A slot is free once no live item refers to it (``user``: the newest item serial that referred to
it). Slots are taken in ring order, skipping slots still in use. If none is free (observations that
share no frames need 2k slots per item), the slot whose users are oldest is taken and those users
must be dropped: ``intern`` returns the serial below which items are gone.
"""

from __future__ import annotations

import numpy as np

_MULT_SEED = 0x5EED


class FrameRing:
    """``slots`` frames of ``shape`` and ``dtype``."""

    def __init__(self, slots: int, shape: tuple[int, ...], dtype: np.dtype):
        self.frames = np.zeros((slots, *shape), dtype)
        self.user = np.full(slots, -1, np.int64)  # newest item serial referring to the slot; -1: never written
        self.fingerprint = np.zeros(slots, np.uint64)
        self.where: dict[int, int] = {}  # fingerprint -> a slot holding a frame with it
        self.pos = 0  # where the search for a free slot starts
        self.written = 0  # frames written (a frame found already held is not written again)
        words = -(-self.frames[0].nbytes // 8)
        self._mult = np.random.default_rng(_MULT_SEED).integers(1, 2**63, words, dtype=np.uint64) | np.uint64(1)

    @property
    def slots(self) -> int:
        return len(self.frames)

    def fingerprints(self, frames: np.ndarray) -> np.ndarray:
        """A 64-bit linear hash of each frame's bytes (equal frames: equal fingerprints)."""
        raw = np.ascontiguousarray(frames).reshape(len(frames), -1).view(np.uint8)
        if raw.shape[1] % 8:
            raw = np.concatenate([raw, np.zeros((len(raw), 8 - raw.shape[1] % 8), np.uint8)], axis=1)
        return raw.view(np.uint64) @ self._mult

    def intern(self, frames: np.ndarray, users: np.ndarray, floor: int) -> tuple[np.ndarray, int]:
        """Slots holding ``frames`` ([m, *shape]), writing those not already held. ``users``: the
        item serial referring to each frame; ``floor``: items below it are gone (their slots are free).
        Needs m <= slots // 2. Returns (slots, floor): the floor rises when slots ran out."""
        fps = self.fingerprints(frames)
        out = np.empty(len(frames), np.int64)
        fresh = np.zeros(len(frames), bool)
        for j, fp in enumerate(fps.tolist()):
            slot = self.where.get(fp)
            if slot is None:
                slot, floor = self._take(floor)
                self._index(slot, fp)
                fresh[j] = True
            self.user[slot] = users[j]
            out[j] = slot
        self.frames[out[fresh]] = frames[fresh]
        self.written += int(fresh.sum())
        shared = np.flatnonzero(~fresh)
        if len(shared):  # a fingerprint collision: the frame gets a slot of its own, not indexed
            differ = (self.frames[out[shared]] != frames[shared]).reshape(len(shared), -1).any(axis=1)
            for j in shared[differ].tolist():
                slot, floor = self._take(floor)
                self.user[slot] = users[j]
                self.frames[slot] = frames[j]
                self.written += 1
                out[j] = slot
        return out, floor

    def _take(self, floor: int) -> tuple[int, int]:
        """A slot to overwrite, and the floor after taking it (raised if the slot was still in use)."""
        slot = self.pos
        if self.user[slot] >= floor:  # usually the next slot is free: search only when it is not
            free = np.flatnonzero(self.user[slot:slot + 256] < floor)
            if len(free):
                slot += int(free[0])
            else:
                free = np.flatnonzero(self.user < floor)
                if len(free):
                    after = free[free >= self.pos]
                    slot = int(after[0] if len(after) else free[0])
                else:  # every slot is in use: take the one whose users are oldest, and drop them
                    slot = int(np.argmin(self.user))
                    floor = int(self.user[slot]) + 1
        self.pos = (slot + 1) % self.slots
        self._unindex(slot)
        return slot, floor

    def _index(self, slot: int, fp: int) -> None:
        self.fingerprint[slot] = fp
        self.where[fp] = slot

    def _unindex(self, slot: int) -> None:
        if self.user[slot] >= 0 and self.where.get(int(self.fingerprint[slot])) == slot:
            del self.where[int(self.fingerprint[slot])]
        self.user[slot] = -1

    def reindex(self, floor: int) -> None:
        """Rebuild the fingerprint index from the frames in use (after loading)."""
        self.where.clear()
        used = np.flatnonzero(self.user >= floor)
        self.user[self.user < floor] = -1
        for start in range(0, len(used), 4096):
            part = used[start:start + 4096]
            self.fingerprint[part] = self.fingerprints(self.frames[part])
        for slot, fp in zip(used.tolist(), self.fingerprint[used].tolist()):
            self.where.setdefault(fp, slot)
