# examples/robot/env.py
"""The robot: a point mass on a table that must reach a goal. Both the worker (which steps it) and the trainer
(which evaluates on it) import this module, so its env id is "examples.robot.env:make"."""

import gymnasium as gym
import numpy as np


class Reacher(gym.Env):
    """obs: position, velocity, goal (6 floats); action: a force in [-1, 1]^2; reward: minus the distance to the
    goal; episodes of 50 steps of 0.1 s."""

    observation_space = gym.spaces.Box(-2.0, 2.0, (6,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2)
        self.vel = np.zeros(2)
        self.goal = self.np_random.uniform(-1, 1, 2)
        return self._obs(), {}

    def step(self, action):
        force = np.clip(action, -1.0, 1.0)
        self.vel = 0.8 * self.vel + 0.1 * force  # friction, then the push
        self.pos = np.clip(self.pos + self.vel, -1.0, 1.0)
        distance = float(np.linalg.norm(self.goal - self.pos))
        return self._obs(), -distance, False, False, {}

    def _obs(self):
        return np.concatenate([self.pos, self.vel, self.goal]).astype(np.float32)


def make():
    return gym.wrappers.TimeLimit(Reacher(), max_episode_steps=50)
