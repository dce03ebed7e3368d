"""Double-buffered collection (``env.groups: 2``): the policy acts for one group of envs while the other
group's workers step (Sample Factory's double-buffered sampling).

``OnPolicyCollector`` steps all N envs, then runs the policy on all N observations, then steps again: the
env workers idle while the policy infers, and the policy waits while they step. With the envs split into
groups, each a vector env of its own whose ``send`` starts the step and returns (subproc workers; ALE's
native vector env)::

    act(A), send(A); act(B), send(B)
    for t in range(T):
        recv(A), store A's step t; act(A), send(A)      # B's workers are stepping meanwhile
        recv(B), store B's step t; act(B), send(B)      # and A's now

The rollout is the same [T, N] rollout, group g's envs in its columns, every step acted on by the same
policy version; the policy runs on N/G observations at a time instead of N. Group g's env k is seeded
``seed + g * N/G + k``, as env ``g * N/G + k`` of one vector env would be. A rollout ends with every group's
last step received, so the next one starts from observations its own policy version acts on.

Recurrent policies (one hidden state for all envs) keep ``env.groups: 1``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from relayrl.core import Policy, SampleSource
from relayrl.data.rollout import RolloutStore
from relayrl.envs.vector import VectorEnv
from relayrl.errors import ConfigError
from relayrl.training.collector import EpisodeStats, store_step
from relayrl.types import Batch, PolicyOutput

__all__ = ["DoubleBufferedCollector"]


class _Group:
    """One vector env of the collector, its columns of the rollout, where it is."""

    def __init__(self, venv: VectorEnv, start: int):
        self.venv = venv
        self.cols = slice(start, start + venv.num_envs)
        self.episodes = EpisodeStats(venv.num_envs)
        self.obs: np.ndarray | None = None
        self.mask: np.ndarray | None = None  # the actions its envs allow at ``obs`` (None: no masks)
        self.out: PolicyOutput | None = None  # what the policy did at ``obs``, sent to its envs


class DoubleBufferedCollector(SampleSource):
    """[T, N] rollouts from ``venvs`` stepped in turn (module docstring)."""

    def __init__(self, venvs: Sequence[VectorEnv], policy: Policy, num_steps: int):
        if policy.recurrent:
            raise ConfigError("env.groups > 1 needs a feed-forward policy (a recurrent one carries its state for all "
                              "envs together): set env.groups=1")
        self.groups: list[_Group] = []
        start = 0
        for venv in venvs:
            self.groups.append(_Group(venv, start))
            start += venv.num_envs
        self.num_envs = start
        self.policy, self.num_steps = policy, num_steps
        first = venvs[0]
        self.store = RolloutStore(num_steps, self.num_envs, first.single_observation_space.shape,
                                  policy.action_shape, policy.action_dtype, obs_dtype=policy.obs_dtype)

    def reset(self, seed: int | None) -> None:
        for g in self.groups:
            g.obs = g.venv.reset(seed=None if seed is None else seed + g.cols.start)
            g.mask = g.venv.reset_action_mask()
            g.episodes.reset()
            g.out = None

    def _act(self, g: _Group) -> None:
        """Act on group ``g``'s observations and start its envs' step."""
        g.out = self.policy.act_masked(g.obs, "collect", g.mask)
        g.venv.send(g.out.env_action)

    def _receive(self, g: _Group, t: int) -> None:
        """Wait for group ``g``'s step and store it as step ``t`` of its columns."""
        result = g.venv.recv()
        store_step(self.store, t, g.out, result, g.mask, self._final_value, cols=g.cols)
        g.episodes.track(result)
        g.obs, g.mask = result.obs, result.action_mask

    def _final_value(self, obs: np.ndarray, rows: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        return self.policy.value_masked(obs, mask)  # (feed-forward: the rows carry no state)

    def collect(self) -> Batch:
        for g in self.groups:
            self._act(g)
        last = self.num_steps - 1
        for t in range(self.num_steps):
            for g in self.groups:
                self._receive(g, t)
                if t < last:
                    self._act(g)
        return self.store.finish(np.concatenate([self.policy.value_masked(g.obs, g.mask) for g in self.groups]))

    def pull(self) -> tuple[Batch, int]:
        rollout = self.collect()
        return rollout, rollout["reward"].size

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        returns: list[float] = []
        lengths: list[int] = []
        for g in self.groups:
            r, n = g.episodes.pop()
            returns += r
            lengths += n
        return returns, lengths
