"""Shared types: Batch, PolicyOutput, Mode, StepResult.

A ``Batch`` is a plain ``dict[str, np.ndarray]`` whose arrays share their leading dimension.
Standard keys (DESIGN.md): ``obs, action, reward, terminated, truncated, next_obs, logp, value,
version, worker_id, env_id``; algorithms add their own (``advantage``, ``return``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Batch = dict[str, np.ndarray]
COLUMN = "column"
"""Key of an on-policy rollout joined from several collectors' chunks (worker pools, the relay): a [T, N] int
array, the learner's env column each rollout column belongs to. A column may appear twice (one worker's two
chunks, in the order it collected them); a rollout without it holds each env column once, in order. Algorithms
that keep a running state per env (PPO's return for reward scaling) index it by this."""
Mode = Literal["collect", "eval"]


def batch_size(batch: Batch) -> int:
    """Leading dimension shared by every array of ``batch``; raises if they disagree."""
    sizes = {key: len(value) for key, value in batch.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"batch arrays disagree on their leading dimension: {sizes}")
    return next(iter(sizes.values()), 0)


@dataclass(frozen=True)
class PolicyOutput:
    """What ``Policy.act`` returns for a batch of observations.

    Attributes:
        action: the action to learn from, one row per observation.
        env_action: the action to send to the environment (e.g. clipped to the action bounds);
            the same array as ``action`` when no conversion is needed.
        logp: log-probability of ``action`` under the policy (collect mode), or None.
        value: critic value estimate of the observation, or None.
        obs: the observation as the model saw it (after normalisation), to be stored for learning.
    """

    action: np.ndarray
    env_action: np.ndarray
    logp: np.ndarray | None = None
    value: np.ndarray | None = None
    obs: np.ndarray | None = None


@dataclass
class StepResult:
    """One vectorised step: row ``i`` belongs to env ``env_ids[i]``.

    ``obs`` is the observation to act on next (after an autoreset, the first observation of the new
    episode). ``final_obs[i]`` is the last observation of the episode that just ended when
    ``terminated[i] or truncated[i]``; other rows of ``final_obs`` are undefined. ``action_mask`` and
    ``final_action_mask``: the actions allowed at ``obs`` and at ``final_obs`` ([n, width] bool, True =
    allowed; relayrl/envs/masks.py), or None when the envs give no masks.
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray
    env_ids: np.ndarray
    info: list[dict[str, Any]] = field(default_factory=list)
    action_mask: np.ndarray | None = None
    final_action_mask: np.ndarray | None = None

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated
