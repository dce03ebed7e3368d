"""Deterministic evaluation with episodes balanced across envs (DI-engine's VectorEvalMonitor).

Each env runs a fixed quota of episodes (``episodes // n`` plus one for the first
``episodes % n``), so short episodes finishing early cannot crowd out long ones and bias the mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relayrl.core import Policy
from relayrl.envs.vector import VectorEnv


@dataclass
class EvalResult:
    returns: np.ndarray
    lengths: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.returns.mean())

    @property
    def std(self) -> float:
        return float(self.returns.std())


class Evaluator:
    def __init__(self, venv: VectorEnv, episodes: int, seed: int):
        self.venv, self.episodes, self.seed = venv, episodes, seed
        self.count = 0

    def evaluate(self, policy: Policy) -> EvalResult:
        n = self.venv.num_envs
        quota = np.full(n, self.episodes // n)
        quota[: self.episodes % n] += 1
        returns: list[float] = []
        lengths: list[int] = []
        ep_return = np.zeros(n)
        ep_length = np.zeros(n, dtype=np.int64)
        obs = self.venv.reset(seed=self.seed + 100_003 * self.count)
        self.count += 1
        recurrent = policy.recurrent  # a hidden state per env, reset with its episodes
        if recurrent:
            policy.reset_hidden("eval")
        while quota.any():
            result = self.venv.step(policy.act(obs, "eval").env_action)
            if recurrent and result.done.any():
                policy.reset_hidden("eval", result.done)
            ep_return += result.reward
            ep_length += 1
            for k in np.flatnonzero(result.done & (quota > 0)):
                returns.append(float(ep_return[k]))
                lengths.append(int(ep_length[k]))
                quota[k] -= 1
            ep_return[result.done] = 0
            ep_length[result.done] = 0
            obs = result.obs
        return EvalResult(np.array(returns), np.array(lengths))
