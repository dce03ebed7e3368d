"""Generalised Advantage Estimation over a time-major rollout of N envs."""

from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE(γ, λ) advantages and returns, arrays of shape [T, N].

    ``next_values[t]`` is V of the observation that followed step t: the next step's value within
    an episode, V(final observation) where the episode was truncated (time limit: bootstrap), and
    anything where it terminated (ignored: a terminal state is worth 0). The trace is cut at every
    episode end, so each trajectory's advantages depend only on its own steps.
    """
    not_terminal = 1.0 - terminated.astype(np.float32)
    not_done = 1.0 - (terminated | truncated).astype(np.float32)
    deltas = rewards + gamma * next_values * not_terminal - values
    advantages = np.zeros_like(values, dtype=np.float32)
    running = np.zeros(values.shape[1:], dtype=np.float32)
    for t in range(len(rewards) - 1, -1, -1):
        running = deltas[t] + gamma * lam * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values
