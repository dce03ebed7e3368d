"""SeenSet: which sequence numbers of one sender were already handled, in memory bounded by the
sender's window (not by run length)."""

from __future__ import annotations


class SeenSet:
    """Every seq below ``floor`` was seen; ``above`` holds the seen seqs at or over it. Seqs arrive
    roughly in order, so the floor advances and ``above`` stays as small as the gaps in flight."""

    def __init__(self) -> None:
        self.floor = 0
        self.above: set[int] = set()

    def contains(self, seq: int) -> bool:
        return seq < self.floor or seq in self.above

    def add(self, seq: int) -> bool:
        """Mark ``seq`` seen; False if it already was."""
        if self.contains(seq):
            return False
        self.above.add(seq)
        while self.floor in self.above:
            self.above.discard(self.floor)
            self.floor += 1
        return True

    def __len__(self) -> int:
        return len(self.above)
