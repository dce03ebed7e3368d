"""``Replay``: what the replay loop (training/offpolicy.py) uses of a replay, as a type.

Two kinds implement it: ``ReplayBuffer`` (in the learner's process) and the replay service's
``ReplayService`` (shards elsewhere: runtime/service.py), so the loop runs unchanged on either.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from relayrl.types import Batch


@dataclass(frozen=True)
class ReplaySpec:
    """What a learner's replay must be (from its config), for a sample source that runs it as shards."""

    shards: int
    capacity: int  # over every shard together
    batch_size: int
    prioritized: bool = False
    alpha: float = 0.6
    beta: float = 0.4
    beta_steps: int = 100_000
    layout: str = "plain"
    max_use: int | None = None
    seed: int = 0
    columns: tuple[tuple[str, str, tuple[int, ...]], ...] = ()  # (name, dtype, row shape) every chunk must have


class Replay(Protocol):
    max_staleness: int | None  # evicts items this many versions old (then ``sample`` needs the version)

    def add(self, batch: Batch) -> Any:
        """Store transitions ([n, ...] arrays)."""

    def sample(self, n: int, version: int | None = None) -> Batch | None:
        """n items with ``index`` (item ids) and ``weight`` (importance weights); None when nothing is held."""

    def update_priorities(self, index: np.ndarray, priority: np.ndarray) -> int:
        """New priorities for sampled items (by ``index``); items overwritten since are skipped."""

    def stats(self) -> dict[str, float]:
        """``replay/...`` metrics."""

    def save(self, path: str | Path) -> Any:
        """Write what a resume needs at (or beside) ``path``."""

    def load(self, path: str | Path) -> None:
        """Undo ``save``."""

    def __len__(self) -> int:
        """Items held."""
