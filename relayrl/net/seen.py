"""Which chunks were already handled, by (sender, incarnation, seq), in memory bounded per sender.

A worker process numbers its chunks 0, 1, 2, ... and keeps each one until the trainer acknowledges
it, so a chunk may arrive twice (a resend after a reconnect) but never very late: every chunk that
can still arrive sits in its worker's backlog, whose seqs are all within ``net.backlog`` of the
newest one. ``WINDOW`` is the bound relayrl uses for that distance (RelayClient refuses a backlog
plus window larger than it), so a seq more than ``WINDOW`` below the highest seen can be counted as
seen: a gap left by a dropped chunk (the relay's queue overflow, a worker's backlog overflow) does
not make the memory grow.

A restarted worker process that reuses its ``--name`` starts again at seq 0; its *incarnation* (a
number it picks at start, larger than any earlier process of that name used) tells its chunks
apart from the old process's, and the old process's memory is forgotten once the new one appears.
"""

from __future__ import annotations

WINDOW = 4096  # chunks; >= a worker's net.backlog + net.window (checked by RelayClient)


class SeenSet:
    """Every seq below ``floor`` counts as seen; ``above`` holds the seen seqs at or over it. Seqs
    arrive roughly in order, so the floor advances and ``above`` holds only the gaps in flight; a gap
    more than ``window`` below the highest seq is given up (it can no longer be filled), so ``above``
    never holds more than ``window`` seqs."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self.floor = 0
        self.highest = -1
        self.above: set[int] = set()

    def contains(self, seq: int) -> bool:
        return seq < self.floor or seq in self.above

    def add(self, seq: int) -> bool:
        """Mark ``seq`` seen; False if it already was (or is too old to arrive, so counts as seen)."""
        if self.contains(seq):
            return False
        self.above.add(seq)
        self.highest = max(self.highest, seq)
        low = self.highest - self.window + 1  # nothing below this can still arrive
        if low > self.floor:
            if low - self.floor < len(self.above):  # the usual case: the floor moves by one or a few
                for old in range(self.floor, low):
                    self.above.discard(old)
            else:  # a big jump: cheaper to rebuild
                self.above = {s for s in self.above if s >= low}
            self.floor = low
        while self.floor in self.above:
            self.above.discard(self.floor)
            self.floor += 1
        return True

    def __len__(self) -> int:
        return len(self.above)


class Senders:
    """Per sender name, the SeenSet of its newest incarnation only: an older incarnation's memory is
    forgotten when a newer one appears, so memory is one SeenSet per name."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._newest: dict[str, tuple[int, SeenSet]] = {}

    def newest(self, name: str) -> int | None:
        """The newest incarnation seen for ``name`` (None: never seen)."""
        entry = self._newest.get(name)
        return None if entry is None else entry[0]

    def get(self, name: str, incarnation: int, create: bool = True) -> SeenSet | None:
        """The SeenSet of (name, incarnation), made fresh for a newer incarnation (when ``create``);
        None for an incarnation older than the newest (a superseded process), or a newer one
        without ``create``."""
        entry = self._newest.get(name)
        if entry is None or incarnation > entry[0]:
            if not create:
                return None
            entry = self._newest[name] = (incarnation, SeenSet(self.window))
        return entry[1] if entry[0] == incarnation else None

    def __contains__(self, name: str) -> bool:
        return name in self._newest

    def __len__(self) -> int:
        return len(self._newest)
