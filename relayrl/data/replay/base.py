"""``Replay``: what the replay loop (training/offpolicy.py) uses of a replay, as a type.

Two kinds subclass it here: ``ReplayBuffer`` (in the learner's process) and the replay service's
``ReplayService`` (shards elsewhere: runtime/service.py), so the loop runs unchanged on either; a user's own
memory (``<algo>.replay``) subclasses it too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    max_staleness: int | None = None  # evict rows this many versions behind the learner's (by their collecting version)
    samples_per_insert: float | None = None  # the rate limiter (data/replay/ratelimit.py), shared over the shards:
    spi_min_size: int = 0  # its min_size
    spi_error_buffer: float = 0.0  # and error buffer, over every shard together


class Replay(ABC):
    """What the replay loop uses of a replay; subclass it for a memory of your own (``<algo>.replay:
    "module:Class"``, docs/library.md "Your own memory").

    Required: ``add``, ``sample`` and ``__len__``. The rest have defaults: ``update_priorities`` refuses
    (the config refuses ``prioritized: true`` with a memory that does not override it), ``stats`` reports
    nothing, ``save`` writes nothing (a resumed run then starts with an empty memory) and ``load`` is not
    called when nothing was saved; ``max_staleness`` None (set it to have ``sample`` receive the learner's
    version); ``inserted_elsewhere`` None (a replay service's rows come in past ``add``: the rate limiter counts
    them from it).

    A memory of your own is built by keyword: ``Class(capacity=..., observation_space=..., action_space=...,
    seed=..., batch_size=...)`` (``MEMORY_PARAMETERS``).
    """

    max_staleness: int | None = None  # evicts items this many versions old (then ``sample`` needs the version)

    @abstractmethod
    def add(self, batch: Batch) -> Any:
        """Store transitions ([n, ...] arrays)."""

    @abstractmethod
    def sample(self, n: int, version: int | None = None) -> Batch | None:
        """n transitions with every column ``add`` was given, same dtypes and row shapes (the built-in buffer
        adds ``index``, the item ids, and ``weight``, importance weights); None when nothing is held."""

    @abstractmethod
    def __len__(self) -> int:
        """Items held."""

    def update_priorities(self, index: np.ndarray, priority: np.ndarray) -> int:
        """New priorities for sampled items (by ``index``); items overwritten since are skipped."""
        raise NotImplementedError(f"{type(self).__name__} does not do priorities: train with prioritized=false")

    def stats(self) -> dict[str, float]:
        """``replay/...`` metrics."""
        return {}

    def inserted_elsewhere(self) -> int | None:
        """Rows stored past ``add`` so far (a replay service: the workers insert into its shards), for the rate
        limiter; None for a replay that sees every row in ``add``."""
        return None

    def save(self, path: str | Path) -> Any:
        """Write what a resume needs at (or beside) ``path`` (by default nothing: a resume starts empty)."""
        return None

    def load(self, path: str | Path) -> None:
        """Undo ``save`` (called on a resume when ``path`` exists)."""


MEMORY_PARAMETERS = ("capacity", "observation_space", "action_space", "seed", "batch_size")
"""The keywords a memory of your own is built with: buffer_size, the env's spaces (as the policy sees them),
the run's seed and the minibatch size."""
