"""The runtime's messages (DistributedReinforcementLearning.jl's vocabulary), typed and immutable.

Every array a message carries is made read-only when the message is built: a message that was sent
cannot be changed under its receiver, and a receiver that wants to write copies first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", _freeze(self.batch))


@dataclass(frozen=True)
class LoadParams:
    """New weights for the workers, published once per version."""

    version: int
    weights: dict[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", _freeze(self.weights))


@dataclass(frozen=True)
class SampleBatch:
    """The learner asks the replay service for ``n`` transitions sampled at learner ``version``."""

    n: int
    version: int = 0


@dataclass(frozen=True)
class BatchTrainingData:
    """The replay service's answer to SampleBatch (None batch: nothing to sample yet)."""

    batch: Batch | None

    def __post_init__(self) -> None:
        if self.batch is not None:
            object.__setattr__(self, "batch", _freeze(self.batch))


@dataclass(frozen=True)
class UpdatePriority:
    """New priorities for sampled items (``index`` as returned in the sampled batch)."""

    index: np.ndarray
    priority: np.ndarray

    def __post_init__(self) -> None:
        frozen = _freeze({"index": np.asarray(self.index), "priority": np.asarray(self.priority)})
        object.__setattr__(self, "index", frozen["index"])
        object.__setattr__(self, "priority", frozen["priority"])


@dataclass(frozen=True)
class Heartbeat:
    worker_id: int
    time: float
    env_steps: int = 0


@dataclass(frozen=True)
class WorkerFailed:
    """A worker died or raised; the orchestrator decides whether to restart it."""

    worker_id: int
    reason: str


@dataclass(frozen=True)
class Stop:
    reason: str = "stop"
    extra: dict[str, Any] = field(default_factory=dict)
