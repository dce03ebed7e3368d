"""Memory tasks: envs a feed-forward policy cannot solve because the observation hides part of the state.

``relayrl/CartPoleNoVel-v1`` is CartPole-v1 observing only the cart position and the pole angle (the
velocities, entries 1 and 3, are dropped), so a policy must infer them from the observations it has
seen: a recurrent policy can, a feed-forward one only guesses. Registered when ``relayrl.envs`` is
imported.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

CARTPOLE_NO_VEL_ID = "relayrl/CartPoleNoVel-v1"
KEPT = [0, 2]  # cart position, pole angle


class CartPoleNoVelocity(CartPoleEnv):
    """CartPole-v1 (same dynamics, reward, termination and rendering) without the velocity entries."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        space = self.observation_space
        self.observation_space = gym.spaces.Box(space.low[KEPT], space.high[KEPT], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return obs[KEPT], info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[KEPT], reward, terminated, truncated, info


if CARTPOLE_NO_VEL_ID not in gym.registry:
    gym.register(CARTPOLE_NO_VEL_ID, entry_point="relayrl.envs.memory:CartPoleNoVelocity", max_episode_steps=500, reward_threshold=475.0)
