"""The runtime's messages (DistributedReinforcementLearning.jl's vocabulary), typed and immutable.

Who sends what (DESIGN.md's roles):

- ``InsertTransitions``: a rollout worker (or its node proxy) -> the learner, or a replay shard;
- ``LoadParams``: the learner -> the workers (through their node proxies);
- ``SampleBatch``: the learner -> a replay shard; the shard answers ``BatchTrainingData``;
- ``UpdatePriority``: the learner -> the replay shard whose items it learned from;
- ``Heartbeat``: every role -> the orchestrator, with its counters;
- ``Stop``: the orchestrator -> every role, with the deadline it must have stopped by;
- ``WorkerFailed``: a backend -> the orchestrator.

A message is an immutable copy, as the actor model's are, at no extra copy where the transport copies
anyway. Every numpy array a message carries is the message's once it is built: an array that owns its
memory is made read-only in place (no copy; the sender's own handle turns read-only too, so a later write
raises instead of reaching the receiver), a view into a buffer someone may write again is copied, and a view
of read-only memory (bytes, the frames a transport received) is kept. Nothing can change a message under its receiver, on any backend, the inline one included.

``LoadParams`` carries ``policy.get_weights()``: tensors that share memory with the learner's live model,
which the next update changes. Every transport copies them when ``publish`` is called (mp's weight board,
Ray's object store, the relay's wire, the inline workers' own models), so they are not copied here; a
backend that keeps a ``LoadParams`` past ``publish`` (Ray's rate limit) keeps its ``snapshot()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from relayrl.types import Batch


def _freeze(arrays: dict[str, Any]) -> dict[str, Any]:
    """The arrays as the message's own (module docstring): owners made read-only in place, views copied."""
    frozen = {}
    for key, value in arrays.items():
        if isinstance(value, np.ndarray):
            if _writable_elsewhere(value):  # a view of a buffer someone may write again
                value = value.copy()
            value.flags.writeable = False
        frozen[key] = value
    return frozen


def _writable_elsewhere(array: np.ndarray) -> bool:
    """Whether memory under ``array`` can be written through something other than ``array``: a base array that
    is writeable, or a writable buffer at the root (not bytes, nor the read-only frames a transport received)."""
    base = array.base
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return True
        base = base.base
    if base is None:
        return False
    try:
        return not memoryview(base).readonly
    except TypeError:  # (a buffer that says nothing: assume the worst)
        return True


def _copy_tree(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {key: _copy_tree(value) for key, value in tree.items()}
    if isinstance(tree, torch.Tensor):
        return tree.detach().clone()
    if isinstance(tree, np.ndarray):
        return tree.copy()
    return tree


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
    stored_rows: int = 0  # rows a node proxy already inserted into a replay shard (its batch is then empty)
    collect_s: float = 0.0  # the worker's time collecting it (acting and stepping, no waits); 0: not measured

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

    def snapshot(self) -> "LoadParams":
        """These weights copied, for a backend that sends them later: the learner's updates change the tensors
        ``get_weights()`` returns (module docstring)."""
        return LoadParams(self.version, _copy_tree(self.weights))


@dataclass(frozen=True)
class WorkerFailed:
    """A worker died or raised; the orchestrator decides whether to restart it. ``mistake``: the user's
    mistake it raised (an ``EnvError``, exit code 2: a wrong observation shape, a NaN reward), which no
    restart fixes: the run ends with its message."""

    worker_id: int
    reason: str
    mistake: Exception | None = None


@dataclass(frozen=True)
class SampleBatch:
    """A request for ``batch_size`` items from one replay shard. ``version``: the learner's policy
    version (shards that evict stale items need it)."""

    request_id: int
    batch_size: int
    version: int = 0


@dataclass(frozen=True)
class BatchTrainingData:
    """A shard's answer to ``SampleBatch``: ``batch`` holds the items (with ``index``: the shard's item
    ids, and ``mass``: each item's sampling mass, its priority^alpha, or 1 under uniform sampling),
    empty with ``reason`` when the shard cannot sample yet. ``size``, ``total`` and ``min_mass`` describe
    the shard when it sampled: the learner splits its next requests by ``total`` and normalises the
    importance weights over every shard's ``min_mass``."""

    request_id: int
    shard_id: int
    batch: Batch
    size: int
    total: float
    min_mass: float
    reason: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", _freeze(self.batch))


@dataclass(frozen=True)
class UpdatePriority:
    """New priorities for items of one shard (``index``: the shard's item ids as sampled); items
    overwritten or evicted since are skipped and counted by the shard."""

    shard_id: int
    index: np.ndarray
    priority: np.ndarray

    def __post_init__(self) -> None:
        frozen = _freeze({"index": self.index, "priority": self.priority})
        object.__setattr__(self, "index", frozen["index"])
        object.__setattr__(self, "priority", frozen["priority"])


@dataclass(frozen=True)
class Heartbeat:
    """A role's sign of life for the orchestrator: ``role`` ("shard", "proxy", "learner"), its id,
    when it was sent (``time.time()`` of the sender) and its counters."""

    role: str
    role_id: int
    sent_at: float
    counters: dict[str, float]


@dataclass(frozen=True)
class Stop:
    """Stop now: finish or drop the work in hand, write what must survive (a shard its snapshot) and
    exit by ``deadline`` (``time.time()``); whoever sent it kills what is left after that."""

    reason: str
    deadline: float
