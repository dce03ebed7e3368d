"""``AgentImages``: a PettingZoo ParallelEnv whose agents' image observations are shrunk by
``env.resize`` / ``env.grayscale`` (``relayrl/envs/imageobs.py``; made by ``wrap_agents``)."""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
from pettingzoo.utils.wrappers import BaseParallelWrapper

from relayrl.envs.imageobs import image_transform


class AgentImages(BaseParallelWrapper):
    """Every agent's observation through Gymnasium's ``ResizeObservation`` / ``GrayscaleObservation``, as
    ``shrink_images`` does for a Gymnasium env. Every agent has the same observation space (``MultiAgentVectorEnv``
    requires it), so one transform serves them all; the rest (agents, actions, rewards, infos) is the env's."""

    def __init__(self, env: Any, resize: Sequence[int] | None = None, grayscale: bool = False):
        super().__init__(env)
        first = list(env.possible_agents)[0]
        self._transform, self._space = image_transform(env.observation_space(first), resize, grayscale)

    def observation_space(self, agent: Any) -> gym.spaces.Box:
        return self._space

    def _shrink(self, obs: dict[Any, Any]) -> dict[Any, Any]:
        return {agent: self._transform(value) for agent, value in obs.items()}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._shrink(obs), infos

    def step(self, actions: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        return self._shrink(obs), rewards, terminated, truncated, infos


def wrap_agents(env: Any, wrapping: dict[str, Any] | None) -> Any:
    """A PettingZoo ParallelEnv with the ``resize`` / ``grayscale`` options of ``wrapping`` applied (the env
    itself when neither is set)."""
    wrapping = wrapping or {}
    resize, grayscale = wrapping.get("resize"), bool(wrapping.get("grayscale"))
    if resize is None and not grayscale:
        return env
    try:
        return AgentImages(env, resize, grayscale)
    except BaseException:
        env.close()
        raise
