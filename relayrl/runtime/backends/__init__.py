"""Where rollout workers run: ``Backend``, the calls every backend (inline, mp, ray) offers the pool.

What a backend can do beyond those calls is a capability on its type (``serves_replay``), never
inferred from the backend's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from relayrl.runtime.messages import InsertTransitions, LoadParams
    from relayrl.runtime.service import ReplayService
    from relayrl.runtime.shard import ShardOptions

__all__ = ["Backend", "WORKER_SEED_STRIDE"]

WORKER_SEED_STRIDE = 1000


class Backend(ABC):
    """The rollout workers of one run, as the pool (runtime/pool.py) drives them.

    Attributes every backend sets:
        num_workers: the workers it runs (chunks carry ``worker_id`` in 0..num_workers-1).
        restarts: how many times a dead or hung worker was replaced so far (never decreasing).

    Capabilities (class attributes):
        serves_replay: ``replay_service`` runs replay shards beside the workers (processes or Ray actors),
            which the workers insert their transitions into directly; without it, off-policy experience
            comes back through ``receive`` into the learner's own replay.
    """

    serves_replay: ClassVar[bool] = False

    num_workers: int
    restarts: int

    @abstractmethod
    def start(self, seed: int) -> None:
        """Create the workers (worker k seeded ``seed + WORKER_SEED_STRIDE * k``)."""

    @abstractmethod
    def publish(self, params: LoadParams, env_steps: int) -> None:
        """Make ``params`` the weights every worker loads before its next chunk."""

    @abstractmethod
    def request(self, version: int) -> None:
        """On-policy: ask every worker for one chunk collected with ``version``."""

    @abstractmethod
    def receive(self, timeout: float = 0.0) -> list[InsertTransitions]:
        """The chunks that arrived (blocking up to ``timeout`` s for the first), after restarting any worker
        that died."""

    @abstractmethod
    def queue_depth(self) -> int:
        """Chunks collected but not yet received (a metric)."""

    @abstractmethod
    def close(self) -> None:
        """Stop the workers and release what the backend holds."""

    def replay_service(self, options: ShardOptions, num_shards: int, **service_options: Any) -> ReplayService:
        """``num_shards`` replay shards the workers insert into, started by ``start`` (backends with
        ``serves_replay``); ``service_options`` go to ``ReplayService``."""
        raise TypeError(f"{type(self).__name__} runs no replay shards (serves_replay is False)")
