"""Reference policies for tests: the random baseline a learned policy must beat."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.core import Policy
from relayrl.types import Mode, PolicyOutput


class UniformPolicy(Policy):
    """Uniformly random actions of a Discrete(n) space, in every mode (seeded: the same baseline each run)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.spaces.Discrete, seed: int = 0):
        self.observation_space, self.action_space = observation_space, action_space
        self.action_shape, self.action_dtype = (), np.dtype(np.int64)
        self.obs_dtype = np.dtype(observation_space.dtype)
        self.rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, mode: Mode = "collect", action_mask: np.ndarray | None = None) -> PolicyOutput:
        action = self.rng.integers(0, int(self.action_space.n), len(obs)) + int(self.action_space.start)
        return PolicyOutput(action=action, env_action=action)

    def get_weights(self) -> dict[str, Any]:
        return {}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        pass
