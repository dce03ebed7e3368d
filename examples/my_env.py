"""An environment of your own, not registered anywhere: relayrl trains it from its factory.

``make_env`` is defined at the top of an importable module, so every process (env workers, rollout
workers, a remote worker) can build it by name: the run records ``examples.my_env:make_env``.
"""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right along a corridor of ``length`` cells; reward 1 at the end, -0.01 per step."""

    def __init__(self, length: int = 8):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)  # 0: left, 1: right

    def _obs(self) -> np.ndarray:
        return np.array([self.pos / self.length, self.t / (4 * self.length)], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return self._obs(), {}

    def step(self, action):
        self.pos = max(0, self.pos + (1 if int(action) == 1 else -1))
        self.t += 1
        reached = self.pos >= self.length
        return self._obs(), 1.0 if reached else -0.01, reached, self.t >= 4 * self.length, {}


def make_env() -> gym.Env:
    return Corridor(length=8)
