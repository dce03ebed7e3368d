"""Collects on-policy rollouts from a VectorEnv into a RolloutStore and tracks finished episodes."""

from __future__ import annotations

import numpy as np

from relayrl.data.rollout import RolloutStore
from relayrl.envs.vector import VectorEnv
from relayrl.types import Batch


class OnPolicyCollector:
    """``collect()`` steps every env ``num_steps`` times with ``policy.act(obs, "collect")``."""

    def __init__(self, venv: VectorEnv, policy, num_steps: int):
        self.venv, self.policy, self.num_steps = venv, policy, num_steps
        self.store = RolloutStore(num_steps, venv.num_envs, venv.single_observation_space.shape,
                                  policy.action_shape, policy.action_dtype)
        self._obs: np.ndarray | None = None
        self._ep_return = np.zeros(venv.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(venv.num_envs, dtype=np.int64)
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []

    def reset(self, seed: int | None) -> None:
        self._obs = self.venv.reset(seed=seed)
        self._ep_return[:] = 0
        self._ep_length[:] = 0

    def warmup(self, steps: int) -> int:
        """Run the policy without storing anything, updating its observation statistics (prenorm)."""
        saved, self.policy.update_norm = self.policy.update_norm, True
        try:
            for _ in range(steps):
                out = self.policy.act(self._obs, "collect")
                self._obs = self._track(self.venv.step(out.env_action))
        finally:
            self.policy.update_norm = saved
        return steps * self.venv.num_envs

    def collect(self) -> Batch:
        store, policy, venv = self.store, self.policy, self.venv
        for t in range(self.num_steps):
            out = policy.act(self._obs, "collect")
            result = venv.step(out.env_action)
            store.add(t, out.obs, out.action, out.logp, out.value,
                      result.reward, result.terminated, result.truncated)
            truncated = result.truncated & ~result.terminated
            if truncated.any():
                store.bootstrap(t, truncated, policy.value(result.final_obs[truncated]))
            self._obs = self._track(result)
        return store.finish(policy.value(self._obs))

    def _track(self, result) -> np.ndarray:
        self._ep_return += result.reward
        self._ep_length += 1
        done = result.terminated | result.truncated
        if done.any():
            for k in np.flatnonzero(done):
                self.finished_returns.append(float(self._ep_return[k]))
                self.finished_lengths.append(int(self._ep_length[k]))
            self._ep_return[done] = 0
            self._ep_length[done] = 0
        return result.obs

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        returns, lengths = self.finished_returns, self.finished_lengths
        self.finished_returns, self.finished_lengths = [], []
        return returns, lengths
