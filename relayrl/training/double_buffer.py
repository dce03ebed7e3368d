"""Double-buffered collection (``env.groups: 2``): the policy acts for one group of envs while the other
group's workers step (Sample Factory's double-buffered sampling).

The plain collectors step all N envs, then run the policy on all N observations, then step again: the env
workers idle while the policy infers, and the policy waits while they step. With the envs split into groups,
each a vector env of its own whose ``send`` starts the step and returns (subproc workers; ALE's native vector
env), T vector steps (a vector step: every group stepped once) go::

    act(A), send(A); act(B), send(B)
    for t in range(T):
        recv(A), store A's step t; act(A), send(A)      # B's workers are stepping meanwhile
        recv(B), store B's step t; act(B), send(B)      # and A's now

Every step is acted on by the same policy version; the policy runs on N/G observations at a time instead of N.
Group g's env k is seeded ``seed + g * N/G + k``, as env ``g * N/G + k`` of one vector env would be. A pull
ends with every group's last step received, so the next one starts from observations its own policy version
acts on. What is stored is what one vector env of all the envs would give:

- ``DoubleBufferedCollector`` (on-policy): the [T, N] rollout, group g's envs in its columns;
- ``DoubleBufferedReplayCollector`` (off-policy): ``steps_per_pull`` vector steps' (n-step) transitions, each
  group's from an ``NStepAccumulator`` of its own, in ``OffPolicyCollector``'s order: by step, then by env
  (group g's envs after the envs of the groups before it).

Recurrent policies (one hidden state for all envs) keep ``env.groups: 1``; so does ``collect_episodes``
(whole episodes are recorded from one vector env).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Sequence

import numpy as np

from relayrl.core import Policy, SampleSource
from relayrl.data.nstep import NStepAccumulator
from relayrl.data.rollout import RolloutStore
from relayrl.envs.vector import VectorEnv
from relayrl.errors import ConfigError
from relayrl.training.collector import EpisodeStats, push_step, store_step, transitions
from relayrl.training.episodes import Episode
from relayrl.types import Batch, PolicyOutput, StepResult

__all__ = ["DoubleBufferedCollector", "DoubleBufferedReplayCollector"]


class _Group:
    """One vector env of the collector, its columns of the rollout, where it is."""

    def __init__(self, venv: VectorEnv, start: int):
        self.venv = venv
        self.cols = slice(start, start + venv.num_envs)
        self.episodes = EpisodeStats(venv.num_envs)
        self.obs: np.ndarray | None = None
        self.mask: np.ndarray | None = None  # the actions its envs allow at ``obs`` (None: no masks)
        self.out: PolicyOutput | None = None  # what the policy did at ``obs``, sent to its envs
        self.nstep: NStepAccumulator | None = None  # its envs' n-step windows (replay collection)


class _GroupedCollector(SampleSource):
    """The groups stepped in turn (module docstring); a subclass stores each group's steps."""

    def __init__(self, venvs: Sequence[VectorEnv], policy: Policy):
        if policy.recurrent:
            raise ConfigError("env.groups > 1 needs a feed-forward policy (a recurrent one carries its state for all "
                              "envs together): set env.groups=1")
        self.groups: list[_Group] = []
        start = 0
        for venv in venvs:
            self.groups.append(_Group(venv, start))
            start += venv.num_envs
        self.num_envs = start
        self.policy = policy

    def reset(self, seed: int | None) -> None:
        for g in self.groups:
            g.obs = g.venv.reset(seed=None if seed is None else seed + g.cols.start)
            g.mask = g.venv.reset_action_mask()
            g.episodes.reset()
            g.out = None

    @abstractmethod
    def _store(self, g: _Group, t: int, result: StepResult) -> None:
        """Store group ``g``'s step ``t`` of the pull (``g.obs``, ``g.mask``, ``g.out``: what it was acted on)."""

    def _act(self, g: _Group) -> None:
        """Act on group ``g``'s observations and start its envs' step."""
        g.out = self.policy.act_masked(g.obs, "collect", g.mask)
        g.venv.send(g.out.env_action)

    def _receive(self, g: _Group, t: int) -> None:
        """Wait for group ``g``'s step, store it as step ``t``, move on to its next observations."""
        result = g.venv.recv()
        self._store(g, t, result)
        g.episodes.track(result)
        g.obs, g.mask = result.obs, result.action_mask

    def _step(self, steps: int) -> None:
        """``steps`` vector steps, every group's last one received at the end."""
        for g in self.groups:
            self._act(g)
        last = steps - 1
        for t in range(steps):
            for g in self.groups:
                self._receive(g, t)
                if t < last:
                    self._act(g)

    def collect_episodes(self, n: int, seed: int | None = None) -> list[Episode]:
        raise ConfigError("collect_episodes records whole episodes from one vector env, not from env groups: "
                          "build the collector on one vector env of all the envs (env.groups=1)")

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        returns: list[float] = []
        lengths: list[int] = []
        for g in self.groups:
            r, n = g.episodes.pop()
            returns += r
            lengths += n
        return returns, lengths


class DoubleBufferedCollector(_GroupedCollector):
    """[T, N] rollouts from ``venvs`` stepped in turn (module docstring)."""

    def __init__(self, venvs: Sequence[VectorEnv], policy: Policy, num_steps: int):
        super().__init__(venvs, policy)
        self.num_steps = num_steps
        first = venvs[0]
        self.store = RolloutStore(num_steps, self.num_envs, first.single_observation_space.shape,
                                  policy.action_shape, policy.action_dtype, obs_dtype=policy.obs_dtype)

    def _store(self, g: _Group, t: int, result: StepResult) -> None:
        store_step(self.store, t, g.out, result, g.mask, self._final_value, cols=g.cols)

    def _final_value(self, obs: np.ndarray, rows: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        return self.policy.value_masked(obs, mask)  # (feed-forward: the rows carry no state)

    def collect(self) -> Batch:
        self._step(self.num_steps)
        return self.store.finish(np.concatenate([self.policy.value_masked(g.obs, g.mask) for g in self.groups]))

    def pull(self) -> tuple[Batch, int]:
        rollout = self.collect()
        return rollout, rollout["reward"].size


class DoubleBufferedReplayCollector(_GroupedCollector):
    """(n-step) transitions from ``venvs`` stepped in turn, ``steps_per_pull`` vector steps a pull (module
    docstring); the env steps of a pull are ``steps_per_pull * num_envs``, as ``OffPolicyCollector`` counts them."""

    def __init__(self, venvs: Sequence[VectorEnv], policy: Policy, n_step: int, gamma: float,
                 steps_per_pull: int = 1):
        super().__init__(venvs, policy)
        self.n_step, self.gamma, self.steps_per_pull = n_step, gamma, steps_per_pull
        self._chunks: list[Batch] = []
        self._new_windows()

    def reset(self, seed: int | None) -> None:
        super().reset(seed)
        self._new_windows()  # (no window spans a reset)

    def _new_windows(self) -> None:
        for g in self.groups:
            g.nstep = NStepAccumulator(self.n_step, self.gamma, g.venv.num_envs)

    def _store(self, g: _Group, t: int, result: StepResult) -> None:
        push_step(g.nstep, g.obs, g.out, result, self._chunks)

    def collect(self, steps: int) -> tuple[Batch, int]:
        self._chunks = []
        self._step(steps)
        return transitions(self._chunks), steps * self.num_envs

    def pull(self) -> tuple[Batch, int]:
        return self.collect(self.steps_per_pull)
