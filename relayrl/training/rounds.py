"""What one training round takes: ``gather`` the next piece of work, then the Learner learns from it.

    rounds.reset(seed)
    work, steps = rounds.gather(env_steps, updates)   # a [T, N] rollout (on-policy), or UpdatesDue (replay)
    learner.learn(work)                               # rounds.learning.learn(work, progress)
    steps += rounds.steps_received_while_learning()

The work is a ``Work``: a ``Batch`` (the rollout the algorithm learns from) or ``UpdatesDue(n)`` (run n
replay updates); ``rounds.learning`` is the ``LearningStep`` that takes it (the algorithm itself
on-policy, ``ReplayUpdates`` off-policy). ``OnPolicyRounds`` (training/onpolicy.py) and
``ReplayRounds`` (training/offpolicy.py) are the two kinds, side by side; both pull from a
``SampleSource`` and publish weights to it when its collectors hold their own copy of the policy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, Union

from relayrl.core import SampleSource
from relayrl.types import Batch


@dataclass(frozen=True)
class UpdatesDue:
    """An off-policy round's work: ``n`` replay updates are due (0: none yet, or the learner is ahead)."""

    n: int


Work = Union[Batch, UpdatesDue]  # what ``gather`` hands the learning step
W = TypeVar("W", bound=Work)
W_in = TypeVar("W_in", contravariant=True)


class LearningStep(Protocol[W_in]):
    """What learns from one round's work: ``learn(work, progress) -> metrics`` (a "updates" metric, if
    present, is the number of updates it ran; otherwise it counts as one)."""

    def learn(self, work: W_in, progress: float = 0.0) -> dict[str, float]: ...


class Rounds(ABC, Generic[W]):
    samples: SampleSource
    learning: LearningStep[W]  # what the Learner drives

    def reset(self, seed: int | None) -> None:
        self.samples.reset(seed)

    @abstractmethod
    def gather(self, env_steps: int, updates: int) -> tuple[W, int]:
        """The work for the next ``learning.learn`` and the env steps it took to get it."""

    def steps_received_while_learning(self) -> int:
        """Env steps of samples that arrived during the last ``learn`` (a polling source's)."""
        return 0

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.samples.pop_episodes()

    def collect_time_elsewhere(self) -> float:
        """Seconds the last ``gather``'s experience took to collect outside it (``SampleSource.collect_time_elsewhere``)."""
        return self.samples.collect_time_elsewhere()

    def stats(self) -> dict[str, float]:
        return self.samples.stats()

    def state(self) -> dict[str, Any]:
        """Counters a resume needs (stored in the checkpoint's meta): the sample source's under "samples"."""
        return {"samples": self.samples.state()}

    def save(self, folder: Path) -> None:
        """What a resume needs besides the checkpoint (the replay buffer, the source's files), written before it."""
        self.samples.save(folder)

    def restore(self, folder: Path, state: dict[str, Any]) -> None:
        """Undo ``save`` and ``state`` on a resume."""
        self.samples.restore(folder, state.get("samples", {}))
