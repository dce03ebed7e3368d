"""Data-parallel learners: several learner processes, each learning from its own share of the experience, their
gradients averaged before every optimiser step so that all of them hold the same weights (docs/distributed.md,
"Learners"). This package is the algorithm side: the group's calls (collective.py), statistics pooled across
learners (moments.py) and the contract check; placing the learners (processes, Ray actors) is the runtime's.
It imports nothing of relayrl.training, the runtime or the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from relayrl.errors import ConfigError
from relayrl.learners.collective import (SOLO, Collective, LearnerGroupError, ProcessGroup, Solo, init_collective,
                                         per_learner)

if TYPE_CHECKING:
    from relayrl.algos.registry import AlgoEntry
    from relayrl.core import Algorithm

__all__ = ["Collective", "Solo", "SOLO", "ProcessGroup", "LearnerGroupError", "init_collective", "per_learner",
           "check_data_parallel", "broadcast_state"]


def check_data_parallel(entry: AlgoEntry, learners: int) -> None:
    """Refuse ``learners`` > 1 for an algorithm whose class does not declare ``data_parallel`` (relayrl.core's
    Algorithm: it must average its gradients through ``self.learners``); one learner is always fine."""
    if learners < 1:
        raise ConfigError(f"learners={learners}: at least one learner trains the policy; set learners=1 or more")
    if learners > 1 and not entry.algo_cls.data_parallel:
        raise ConfigError(f"{entry.name} cannot learn with {learners} learners: its algorithm class "
                          f"{entry.algo_cls.__qualname__} does not declare data_parallel = True (it would have to "
                          "average its gradients over the learners before every optimiser step: relayrl.core.Algorithm"
                          "'s docstring, docs/library.md \"Your own algorithm\"); set learners=1, or train with ppo, "
                          "appo, dqn or sac")


def broadcast_state(algo: Algorithm, learners: Collective, src: int = 0) -> None:
    """Give every learner learner ``src``'s ``algo.state_dict()`` (weights, optimisers, statistics): a group
    starting from one initial state whatever each process's seed drew."""
    if learners.size == 1:
        return
    state = learners.broadcast_object(algo.state_dict() if learners.rank == src else None, src)
    if learners.rank != src:
        algo.load_state_dict(state)  # type: ignore[arg-type]
