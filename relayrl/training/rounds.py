"""What one training round takes: ``gather`` the next piece of work, then the Learner learns from it.

    rounds.reset(seed)
    work, steps = rounds.gather(env_steps, updates)   # a [T, N] rollout (on-policy), or updates due (replay)
    learner.train(work)                               # rounds.learning.learn(work, progress)
    steps += rounds.steps_received_while_learning()

``OnPolicyRounds`` (training/onpolicy.py) and ``ReplayRounds`` (training/offpolicy.py) are the two
kinds, side by side; both pull from a ``SampleSource`` and publish weights to it when its collectors
hold their own copy of the policy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from relayrl.core import SampleSource


class Rounds(ABC):
    samples: SampleSource
    learning: Any  # what the Learner drives: ``learn(work, progress) -> metrics``

    def reset(self, seed: int | None) -> None:
        self.samples.reset(seed)

    @abstractmethod
    def gather(self, env_steps: int, updates: int) -> tuple[Any, int]:
        """The work for the next ``learning.learn`` and the env steps it took to get it."""

    def steps_received_while_learning(self) -> int:
        """Env steps of samples that arrived during the last ``learn`` (a polling source's)."""
        return 0

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.samples.pop_episodes()

    def stats(self) -> dict[str, float]:
        return self.samples.stats()

    def state(self) -> dict[str, Any]:
        """Counters a resume needs (stored in the checkpoint's meta)."""
        return {}

    def save(self, folder: Path) -> None:
        """What a resume needs besides the checkpoint (the replay buffer), written before it."""

    def restore(self, folder: Path, state: dict[str, Any]) -> None:
        """Undo ``save`` and ``state`` on a resume."""
