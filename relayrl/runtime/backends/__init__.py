"""Where rollout workers run: ``Backend``, the calls every transport offers the pool (runtime/pool.py).

``ManagedBackend``s start, watch and restart their workers (inline, mp, ray); the relay's backend
(``relayrl.net.backend``) takes the chunks of remote workers that come and go on their own. What a
backend can do beyond those calls is a capability on its type (``serves_replay``), never inferred
from the backend's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from relayrl.runtime.messages import InsertTransitions, LoadParams
    from relayrl.runtime.service import ReplayService
    from relayrl.runtime.shard import ShardOptions

__all__ = ["Backend", "ManagedBackend", "WORKER_SEED_STRIDE"]

WORKER_SEED_STRIDE = 1000
SILENCE_LIMIT_S = 120.0  # a managed backend's workers that send nothing for this long are stuck


class Backend(ABC):
    """The rollout workers of one run, as the pool (runtime/pool.py) drives them.

    Attributes every backend sets:
        num_workers: the workers whose chunks make one on-policy rollout (PPO), or the column slots of
            an APPO rollout; chunks carry ``worker_id`` (0..num_workers-1 on managed backends; remote
            workers are numbered as they first send).

    Capabilities (class attributes):
        serves_replay: ``replay_service`` runs replay shards beside the workers (processes or Ray actors),
            which the workers insert their transitions into directly; without it, off-policy experience
            comes back through ``receive`` into the learner's own replay.
        limits_inserts: its replay shards hold inserts back under a rate limiter (``<algo>.samples_per_insert``),
            so that the workers block.
    """

    serves_replay: ClassVar[bool] = False
    limits_inserts: ClassVar[bool] = False

    num_workers: int

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
    def close(self) -> None:
        """Stop the workers and release what the backend holds."""

    def silent(self, seconds: float, waiting_for: str) -> None:
        """The pool has waited ``seconds`` since the last chunk came (its learning time not counted), for
        ``waiting_for``: raise if that means the workers are stuck, or tell the user what the run waits for."""

    def stats(self) -> dict[str, float]:
        """The transport's own metrics, logged with the pool's (e.g. ``runtime/restarts``, ``net/refused``)."""
        return {}

    def worker_name(self, worker_id: int) -> str:
        """How messages name worker ``worker_id``."""
        return str(worker_id)

    def replay_service(self, options: ShardOptions, num_shards: int, **service_options: Any) -> ReplayService:
        """``num_shards`` replay shards the workers insert into, started by ``start`` (backends with
        ``serves_replay``); ``service_options`` go to ``ReplayService``."""
        raise TypeError(f"{type(self).__name__} runs no replay shards (serves_replay is False)")


class ManagedBackend(Backend):
    """Workers this run starts, watches and restarts (inline, mp, ray).

    ``restarts``: how many times a dead or hung worker was replaced so far (never decreasing).
    """

    restarts: int

    @abstractmethod
    def queue_depth(self) -> int:
        """Chunks collected but not yet received (a metric)."""

    def silent(self, seconds: float, waiting_for: str) -> None:
        from relayrl.errors import RelayRLError

        if seconds >= SILENCE_LIMIT_S:
            raise RelayRLError(f"no samples from any of the {self.num_workers} rollout workers for {seconds:.0f} s "
                               f"({waiting_for}): check the env's step time and the worker logs")

    def stats(self) -> dict[str, float]:
        return {"runtime/restarts": float(self.restarts), "runtime/queue_depth": float(self.queue_depth())}
