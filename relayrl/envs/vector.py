"""VectorEnv: N environment copies behind send/recv, with autoreset that keeps the final observation.

Usage::

    venv = make_vec("CartPole-v1", num_envs=8, seed=0)
    obs = venv.reset()
    while training:
        result = venv.step(actions)          # send(actions) + recv()
        # result.obs is the next obs to act on; result.final_obs[i] is the last obs of an episode
        # that ended on this step (terminated[i] or truncated[i]), for bootstrapping.
    venv.close()
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.envs.registry import make
from relayrl.errors import EnvError
from relayrl.types import StepResult

EnvFactory = Callable[[], gym.Env]


class VectorEnv:
    """Interface shared by every manager (sync here; shared-memory subprocess ones later)."""

    num_envs: int
    single_observation_space: gym.Space
    single_action_space: gym.Space

    def reset(self, seed: int | None = None) -> np.ndarray:
        raise NotImplementedError

    def send(self, actions: np.ndarray) -> None:
        raise NotImplementedError

    def recv(self) -> StepResult:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> StepResult:
        self.send(actions)
        return self.recv()

    def close(self) -> None:
        pass

    def __enter__(self) -> "VectorEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SyncVectorEnv(VectorEnv):
    """All envs in this process, stepped in order. Observations land in one preallocated array."""

    def __init__(self, factories: list[EnvFactory]):
        if not factories:
            raise EnvError("a vector env needs at least one environment (num_envs >= 1)")
        self.envs = [factory() for factory in factories]
        self.num_envs = len(self.envs)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        space = self.single_observation_space
        if not isinstance(space, gym.spaces.Box):
            raise EnvError(f"observation space {space} is not supported yet: relayrl handles Box "
                           "observations; wrap the env with gymnasium.wrappers.FlattenObservation")
        self._obs = np.zeros((self.num_envs, *space.shape), dtype=space.dtype)
        self._final_obs = np.zeros_like(self._obs)
        self._reward = np.zeros(self.num_envs, dtype=np.float32)
        self._terminated = np.zeros(self.num_envs, dtype=bool)
        self._truncated = np.zeros(self.num_envs, dtype=bool)
        self._env_ids = np.arange(self.num_envs)
        self._action_shape = self.single_action_space.shape
        self._discrete = isinstance(self.single_action_space, gym.spaces.Discrete)
        self._actions: np.ndarray | None = None

    def reset(self, seed: int | None = None) -> np.ndarray:
        for k, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seed is None else seed + k)
            self._obs[k] = obs
        if seed is not None:
            for k, env in enumerate(self.envs):
                env.action_space.seed(seed + k)
        return self._obs.copy()

    def send(self, actions: np.ndarray) -> None:
        actions = np.asarray(actions)
        expected = (self.num_envs, *self._action_shape)
        if actions.shape != expected:
            raise EnvError(f"actions have shape {actions.shape}, expected {expected} "
                           f"(num_envs={self.num_envs}, action space {self.single_action_space})")
        self._actions = actions

    def recv(self) -> StepResult:
        if self._actions is None:
            raise EnvError("recv() called without a pending send(actions)")
        actions, self._actions = self._actions, None
        infos = []
        obs_buf, reward, terminated, truncated = self._obs, self._reward, self._terminated, self._truncated
        for k, env in enumerate(self.envs):
            action = int(actions[k]) if self._discrete else actions[k]
            obs, r, term, trunc, info = env.step(action)
            reward[k] = r
            terminated[k] = term
            truncated[k] = trunc
            if term or trunc:
                self._final_obs[k] = obs
                obs, reset_info = env.reset()
                if reset_info:
                    info = {**info, "reset_info": reset_info}
            obs_buf[k] = obs
            infos.append(info)
        return StepResult(obs=obs_buf.copy(), reward=reward.copy(), terminated=terminated.copy(),
                          truncated=truncated.copy(), final_obs=self._final_obs.copy(),
                          env_ids=self._env_ids, info=infos)

    def render(self, index: int = 0) -> Any:
        return self.envs[index].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


def make_vec(env_id_or_factory: str | EnvFactory, num_envs: int, *, seed: int | None = None,
             env_kwargs: dict[str, Any] | None = None, max_episode_steps: int | None = None,
             render_mode: str | None = None) -> VectorEnv:
    """Build ``num_envs`` copies of an env (by Gymnasium id or factory) in a SyncVectorEnv."""
    if callable(env_id_or_factory):
        factories = [env_id_or_factory] * num_envs
    else:
        env_id = env_id_or_factory
        kwargs = dict(env_kwargs or {})

        def factory() -> gym.Env:
            return make(env_id, max_episode_steps=max_episode_steps, render_mode=render_mode, **kwargs)

        factories = [factory] * num_envs
    venv = SyncVectorEnv(factories)
    if seed is not None:
        venv.reset(seed=seed)
    return venv
