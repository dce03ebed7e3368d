"""Evaluation: ``evaluate(policy) -> EvalResult`` (or None when there is nothing to report yet).

``Evaluator`` runs deterministic episodes balanced across vector envs (DI-engine's
VectorEvalMonitor): each env runs a fixed quota of episodes (``episodes // n`` plus one for the
first ``episodes % n``), so short episodes finishing early cannot crowd out long ones and bias the
mean. ``ReportedEvaluator`` takes the episodes others ran (remote workers' test episodes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import logging

import numpy as np

from relayrl.core import Policy
from relayrl.envs.vector import VectorEnv

log = logging.getLogger("relayrl")


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


class Evaluation(ABC):
    """``count``: evaluations run so far (each one's seed depends on it; it survives a resume)."""

    count: int = 0

    @abstractmethod
    def evaluate(self, policy: Policy) -> EvalResult | None:
        """Deterministic episodes of ``policy``; None when none could be had this time."""


class ReportedEvaluator(Evaluation):
    """The deterministic episodes remote collectors ran and reported (``reported()`` returns the
    returns of those finished since the last call): an env that exists only on their machines."""

    def __init__(self, reported: Callable[[], list[float]], missing: str = ""):
        """``missing``: what to tell the user, once, when an evaluation finds nothing reported."""
        self.reported, self.missing = reported, missing
        self.count = 0

    def evaluate(self, policy: Policy) -> EvalResult | None:
        returns = self.reported()
        if not returns:
            if self.missing:
                log.warning("%s", self.missing)
                self.missing = ""
            return None
        self.count += 1
        return EvalResult(np.asarray(returns, dtype=np.float64), np.zeros(0, dtype=np.int64))


class Evaluator(Evaluation):
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
        mask = self.venv.reset_action_mask()  # forbidden actions are never chosen (None: the env gives no masks)
        self.count += 1
        recurrent = policy.recurrent  # a hidden state per env, reset with its episodes
        if recurrent:
            policy.reset_hidden("eval")
        while quota.any():
            result = self.venv.step(policy.act_masked(obs, "eval", mask).env_action)
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
            obs, mask = result.obs, result.action_mask
        return EvalResult(np.array(returns), np.array(lengths))
