"""NativeBackend: what an adapter of one family of native vector envs provides to NativeVectorEnv (envs/native.py).

Its own module so that the adapters outside native.py (envs/ale_vector.py) and native.py, which builds them,
both import it without importing each other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import gymnasium as gym
import numpy as np

__all__ = ["NativeBackend", "StepArrays", "in_env_order"]

StepArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def in_env_order(ids: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """``arrays``' rows in env order, given the env id of each row (a synchronous C++ pool, EnvPool's or ALE's,
    answers in it already: then the arrays themselves)."""
    if np.array_equal(ids, np.arange(len(ids))):
        return arrays
    order = np.argsort(ids)
    return tuple(a[order] for a in arrays)


class NativeBackend(ABC):
    """One family of native vector envs, autoresetting on the same step.

    ``send`` / ``recv`` split a step: by default ``send`` keeps the actions and ``recv`` steps; a backend that
    steps in its own threads (ALE's) starts the step in ``send``, so its caller can work until ``recv``.
    """

    num_envs: int
    single_observation_space: gym.Space
    single_action_space: gym.Space
    _sent: np.ndarray | None = None

    @abstractmethod
    def reset(self, seed: int | None) -> np.ndarray:
        """Reset every env (env k seeded ``seed + k``); the first observations."""

    @abstractmethod
    def step(self, actions: np.ndarray) -> StepArrays:
        """(obs, reward, terminated, truncated, final_obs): finished envs already reset in ``obs``."""

    def send(self, actions: np.ndarray) -> None:
        """Start a step with these (checked) actions."""
        self._sent = actions

    def recv(self) -> StepArrays:
        """The step ``send`` started, as ``step`` returns it."""
        actions, self._sent = self._sent, None
        return self.step(actions)

    def close(self) -> None:
        pass
