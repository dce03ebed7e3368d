"""The runtime's messages (DistributedReinforcementLearning.jl's vocabulary), typed and immutable.

Only the messages something sends are defined; the replay service's (SampleBatch, BatchTrainingData,
UpdatePriority) and the orchestrator's (Heartbeat, Stop) come with the roles that send them.

Every array a message carries is made read-only when the message is built: a message that was sent
cannot be changed under its receiver, and a receiver that wants to write copies first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from relayrl.types import Batch


def _freeze(arrays: dict[str, Any]) -> dict[str, Any]:
    frozen = {}
    for key, value in arrays.items():
        if isinstance(value, np.ndarray):
            value = value.view()
            value.flags.writeable = False
        frozen[key] = value
    return frozen


@dataclass(frozen=True)
class InsertTransitions:
    """A chunk of experience from one worker: off-policy transitions, or an on-policy rollout
    segment (``[T, N]`` arrays plus ``last_value``). ``seq`` counts the worker's chunks from 0."""

    worker_id: int
    seq: int
    version: int  # the policy version that produced every row
    batch: Batch
    env_steps: int
    episode_returns: tuple[float, ...] = ()
    episode_lengths: tuple[int, ...] = ()
    obs_moments: dict[str, Any] | None = None  # count, mean, var of the raw observations acted on (obs_norm)

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", _freeze(self.batch))
        if self.obs_moments is not None:
            object.__setattr__(self, "obs_moments", _freeze(self.obs_moments))


@dataclass(frozen=True)
class LoadParams:
    """New weights for the workers, published once per version."""

    version: int
    weights: dict[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", _freeze(self.weights))


@dataclass(frozen=True)
class WorkerFailed:
    """A worker died or raised; the orchestrator decides whether to restart it."""

    worker_id: int
    reason: str
