"""Data-parallel learners: several learner processes, each learning from its own share of the experience, their
gradients averaged before every optimiser step so that all of them hold the same weights (docs/distributed.md,
"Learners"). This package is the algorithm side: the group's calls (collective.py), statistics pooled across
learners (moments.py) and one initial state for all (``broadcast_state``); which algorithms may take part is the
registry's (``AlgoEntry.check_learners``); placing the learners (processes, Ray actors) is the runtime's.
It imports nothing of relayrl.core, the algorithms, relayrl.training, the runtime or the CLI.
"""

from __future__ import annotations

from typing import Any, Protocol

from relayrl.learners.collective import (SOLO, Collective, LearnerGroupError, ProcessGroup, Solo, init_collective,
                                         per_learner)

__all__ = ["Collective", "Solo", "SOLO", "ProcessGroup", "LearnerGroupError", "init_collective", "per_learner",
           "broadcast_state", "HasState"]


class HasState(Protocol):
    """What ``broadcast_state`` needs of an algorithm (relayrl.core.Algorithm has it)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def broadcast_state(algo: HasState, learners: Collective, src: int = 0) -> None:
    """Give every learner learner ``src``'s ``algo.state_dict()`` (weights, optimisers, statistics): a group
    starting from one initial state whatever each process's seed drew."""
    if learners.size == 1:
        return
    state = learners.broadcast_object(algo.state_dict() if learners.rank == src else None, src)
    if learners.rank != src:
        algo.load_state_dict(state)  # type: ignore[arg-type]
