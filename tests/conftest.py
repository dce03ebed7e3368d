"""Shared fixtures: small budgets and test-only environments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from relayrl.config import build_config


class NanRewardEnv(gym.Env):
    """Returns a NaN reward after a few steps: drives the non-finite guard."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float("nan") if self.t > 3 else 1.0
        return np.full(3, 0.1 * self.t, np.float32), reward, False, self.t >= 20, {}


if "relayrl-test/NanReward-v0" not in gym.registry:
    gym.register("relayrl-test/NanReward-v0", entry_point=NanRewardEnv)


@pytest.fixture
def tiny_config():
    """A PPO config that runs a few iterations in well under a second."""

    def make(*sets: str, **overrides):
        base = ["env.num_envs=2", "ppo.num_steps=16", "ppo.batch_size=16", "ppo.epochs=2",
                "eval.freq=64", "eval.episodes=2", "eval.num_envs=2"]
        return build_config("ppo", None, [*base, *sets], {"total_steps": 128, **overrides})

    return make
