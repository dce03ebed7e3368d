"""The local collectors: ``OnPolicyCollector`` ([T, N] rollouts into a RolloutStore) and
``OffPolicyCollector`` ((n-step) transitions for replay), both stepping a VectorEnv and tracking the
episodes that finish."""

from __future__ import annotations

from typing import Callable

import numpy as np

from relayrl.core import Policy, SampleSource
from relayrl.data.dtypes import store_transitions
from relayrl.data.nstep import NStepAccumulator
from relayrl.data.rollout import RolloutStore
from relayrl.envs.vector import VectorEnv
from relayrl.training.episodes import Episode, record_episodes
from relayrl.types import Batch, PolicyOutput, StepResult


class EpisodeStats:
    """Returns and lengths of the episodes that finish in a VectorEnv, tracked from step results."""

    def __init__(self, num_envs: int):
        self._return = np.zeros(num_envs, dtype=np.float64)
        self._length = np.zeros(num_envs, dtype=np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def reset(self) -> None:
        self._return[:] = 0
        self._length[:] = 0

    def track(self, result) -> None:
        self._return += result.reward
        self._length += 1
        done = result.terminated | result.truncated
        if np.count_nonzero(done):  # (cheaper than done.any(), which goes through a Python wrapper)
            for k in np.flatnonzero(done):
                self.returns.append(float(self._return[k]))
                self.lengths.append(int(self._length[k]))
            self._return[done] = 0
            self._length[done] = 0

    def pop(self) -> tuple[list[float], list[int]]:
        returns, lengths = self.returns, self.lengths
        self.returns, self.lengths = [], []
        return returns, lengths


def store_step(store: RolloutStore, t: int, out: PolicyOutput, result: StepResult, mask: np.ndarray | None,
               value: Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray],
               hidden: np.ndarray | None = None, cols: slice | None = None) -> None:
    """Step ``t`` of a rollout (of the envs ``cols`` only, when given): what the policy did under ``mask``, what the
    envs returned, and for the envs truncated at t V(final observation), ``value(final_obs, truncated, final_mask)``
    (``truncated``: the mask over the envs stepped)."""
    store.add(t, out.obs, out.action, out.logp, out.value, result.reward, result.terminated, result.truncated,
              hidden, mask, cols=cols)
    truncated = result.truncated & ~result.terminated
    if np.count_nonzero(truncated):
        final_mask = None if result.final_action_mask is None else result.final_action_mask[truncated]
        at = truncated if cols is None else cols.start + np.flatnonzero(truncated)
        store.bootstrap(t, at, value(result.final_obs[truncated], truncated, final_mask))


def push_step(nstep: NStepAccumulator, obs: np.ndarray, out: PolicyOutput, result: StepResult,
              chunks: list[Batch]) -> None:
    """One vector step into ``nstep``: the policy's ``out`` at ``obs``, what the envs returned; the (n-step)
    transitions it completes, if any, are appended to ``chunks``. Where an episode ended, the transition goes to
    its final observation and final action mask (DQN's target max runs over the actions allowed there)."""
    done = result.terminated | result.truncated
    next_obs = np.where(done.reshape(-1, *[1] * (result.obs.ndim - 1)), result.final_obs, result.obs)
    next_mask = None if result.action_mask is None else \
        np.where(done[:, None], result.final_action_mask, result.action_mask)
    chunk = nstep.push(obs, out.action, result.reward, next_obs, result.terminated, result.truncated, next_mask)
    if chunk:
        chunks.append(chunk)


def transitions(chunks: list[Batch]) -> Batch:
    """``push_step``'s chunks in their order, as replay stores them (workers send what replay stores)."""
    batch = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]} if chunks else {}
    return store_transitions(batch)


class OnPolicyCollector(SampleSource):
    """``collect()`` steps every env ``num_steps`` times with ``policy.act(obs, "collect")``.

    A recurrent policy (``policy.recurrent``) carries a hidden state per env: the rollout stores the
    state each step started from, episodes that end reset their env's state (the autoreset
    observation starts the next episode), and unfinished episodes carry theirs into the next rollout.
    """

    def __init__(self, venv: VectorEnv, policy: Policy, num_steps: int):
        self.venv, self.policy, self.num_steps = venv, policy, num_steps
        self.recurrent = policy.recurrent
        self.store = RolloutStore(num_steps, venv.num_envs, venv.single_observation_space.shape,
                                  policy.action_shape, policy.action_dtype,
                                  hidden_size=policy.state_size if self.recurrent else 0,
                                  obs_dtype=policy.obs_dtype)  # the dtype of out.obs
        self._obs: np.ndarray | None = None
        self._mask: np.ndarray | None = None  # the actions the envs allow at self._obs (None: no masks)
        self.episodes = EpisodeStats(venv.num_envs)

    def reset(self, seed: int | None) -> None:
        self._obs = self.venv.reset(seed=seed)
        self._mask = self.venv.reset_action_mask()
        self.episodes.reset()
        if self.recurrent:
            self.policy.reset_hidden("collect")

    def warmup(self, steps: int) -> int:
        """Run the policy without storing anything, updating its observation statistics (prenorm)."""
        saved, self.policy.update_norm = self.policy.update_norm, True
        try:
            for _ in range(steps):
                out = self.policy.act_masked(self._obs, "collect", self._mask)
                self._obs = self._track(self.venv.step(out.env_action))
        finally:
            self.policy.update_norm = saved
        return steps * self.venv.num_envs

    def collect(self) -> Batch:
        store, policy, venv = self.store, self.policy, self.venv
        for t in range(self.num_steps):
            hidden = policy.hidden("collect", venv.num_envs).cpu().numpy() if self.recurrent else None
            out = policy.act_masked(self._obs, "collect", self._mask)
            result = venv.step(out.env_action)
            store_step(store, t, out, result, self._mask, self._value, hidden)
            self._obs = self._track(result)
        return store.finish(self._value(self._obs, None, self._mask))

    def pull(self) -> tuple[Batch, int]:
        rollout = self.collect()
        return rollout, rollout["reward"].size

    def collect_episodes(self, n: int, seed: int | None = None) -> list[Episode]:
        """``n`` whole episodes with their ``logp`` and ``value`` (training/episodes.py): the envs are reset
        first (``seed``: env k gets seed + k), so episodes under way are dropped; ``collect()`` then goes on
        from where the envs are."""
        self.reset(seed)
        episodes, self._obs, self._mask = record_episodes(self.venv, self.policy, n, self._obs, self._mask,
                                                          self.episodes.track, values=True)
        return episodes

    def _value(self, obs: np.ndarray, rows: np.ndarray | None, mask: np.ndarray | None) -> np.ndarray:
        # a recurrent critic continues the state of the envs these observations belong to; ``mask``: the actions
        # allowed at ``obs`` (PQN's max_a Q runs over those only)
        return self.policy.value_masked(obs, mask, rows if self.recurrent else None)

    def _track(self, result) -> np.ndarray:
        self.episodes.track(result)
        self._mask = result.action_mask
        if self.recurrent and result.done.any():
            self.policy.reset_hidden("collect", result.done)  # after bootstrapping from the old state
        return result.obs

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.episodes.pop()


class OffPolicyCollector(SampleSource):
    """Steps a VectorEnv with ``policy.act(obs, "collect")`` and emits (n-step) transitions.

    It is the local sample source (relayrl/core.py); any other ``SampleSource`` can take its place
    (worker pools, the relay). A source with ``can_poll`` returns at once from ``poll()`` with
    whatever has arrived: the learner then drains it mid-round (``update_buffer_interval``).
    """

    def __init__(self, venv: VectorEnv, policy: Policy, n_step: int, gamma: float, steps_per_pull: int = 1):
        self.venv, self.policy, self.steps_per_pull = venv, policy, steps_per_pull
        self.n_step, self.gamma = n_step, gamma
        self.nstep = NStepAccumulator(n_step, gamma, venv.num_envs)
        self.episodes = EpisodeStats(venv.num_envs)
        self._obs = None
        self._mask: np.ndarray | None = None  # the actions the envs allow at self._obs (None: no masks)

    def reset(self, seed: int | None) -> None:
        self._obs = self.venv.reset(seed=seed)
        self._mask = self.venv.reset_action_mask()
        self.episodes.reset()
        self.nstep = NStepAccumulator(self.n_step, self.gamma, self.venv.num_envs)  # (no window spans a reset)

    def collect_episodes(self, n: int, seed: int | None = None) -> list[Episode]:
        """``n`` whole one-step episodes (training/episodes.py): the envs are reset first (``seed``: env k gets
        seed + k), so episodes under way are dropped; ``collect()`` then goes on from where the envs are."""
        self.reset(seed)
        episodes, self._obs, self._mask = record_episodes(self.venv, self.policy, n, self._obs, self._mask,
                                                          self.episodes.track)
        return episodes

    def collect(self, steps: int) -> tuple[Batch, int]:
        chunks: list[Batch] = []
        for _ in range(steps):
            out = self.policy.act_masked(self._obs, "collect", self._mask)
            result = self.venv.step(out.env_action)
            push_step(self.nstep, self._obs, out, result, chunks)
            self.episodes.track(result)
            self._obs, self._mask = result.obs, result.action_mask
        return transitions(chunks), steps * self.venv.num_envs

    def pull(self) -> tuple[Batch, int]:
        return self.collect(self.steps_per_pull)

    def pop_episodes(self) -> tuple[list[float], list[int]]:
        return self.episodes.pop()
