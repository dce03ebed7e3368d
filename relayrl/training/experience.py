"""Where a run's experience comes from and how it is evaluated: what a launch hands the Trainer.

An ``Experience`` knows the spaces the algorithm is built for, builds the sample source the loop
pulls from once the learner's policy exists, and builds the evaluator::

    experience = GymExperience(config)                      # local Gymnasium vector envs
    algo = Algo(cfg, experience.observation_space, experience.action_space, experience.columns)
    source = experience.source(algo.policy, cfg, on_policy=True)
    evaluator = experience.evaluator(config.eval.episodes, seed)
    ...
    experience.close()

The kinds:

- ``GymExperience``: Gymnasium vector envs in this process or the env managers' workers (the plain
  local run);
- ``AgentExperience``: an agent env (``relayrl/envs/agents.py``: a simulator bridge's behaviour),
  whose agents are the rows;
- ``SourceExperience``: a sample source of someone else's collectors (a worker pool, the relay, a
  queue of your own), with evaluation on local envs or from episodes the collectors report.

Only ``SourceExperience`` sources hold their own copy of the policy (``shares_policy`` is False): the
Trainer publishes new weights to them.
"""

from __future__ import annotations

import copy
import os
from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym

from relayrl.core import Policy, SampleSource
from relayrl.envs.agents import AgentEnv
from relayrl.envs.auto import choose_manager
from relayrl.envs.managers import EnvMaker, make_vec
from relayrl.envs.mirror_source import env_mirror_of
from relayrl.envs.native import native_stop_value, picks_native
from relayrl.envs.registry import spec_stop_value
from relayrl.envs.vector import VectorEnv
from relayrl.errors import ConfigError
from relayrl.options import RunConfig
from relayrl.policy.mirror import EnvMirrorIndices
from relayrl.training.agent_collectors import AgentEvaluator, agent_collector
from relayrl.training.collector import OffPolicyCollector, OnPolicyCollector
from relayrl.training.double_buffer import DoubleBufferedCollector, DoubleBufferedReplayCollector
from relayrl.training.evaluator import Evaluation, Evaluator
from relayrl.training.overlap import OverlappedCollector

__all__ = ["Experience", "EnvPair", "GymExperience", "AgentExperience", "SourceExperience", "env_setup"]


class Experience(ABC):
    """Spaces, a sample source, an evaluator; see the module docstring."""

    observation_space: gym.Space
    action_space: gym.Space
    columns: int  # env columns of one on-policy rollout (the algorithm sizes per-env state by it)
    agents: bool = False  # rows are agents that come and go (no fixed env columns)
    shares_policy: bool = True  # the source's collectors act with the learner's policy object itself
    overlaps: bool = False  # its source collects the next pull while the learner learns (``overlap``)

    @abstractmethod
    def source(self, policy: Policy, cfg: Any, on_policy: bool) -> SampleSource:
        """The sample source the loop pulls from; on-policy: [T, N] rollouts, off-policy: transitions."""

    @abstractmethod
    def evaluator(self, episodes: int, seed: int) -> Evaluation:
        """What ``evaluate(policy)`` runs on."""

    def stats(self) -> dict[str, float]:
        """The envs' counters, logged as ``env/<name>`` with every iteration (a name with a "/" as it is)."""
        return {}

    def simulator_stats(self) -> dict[str, float]:
        """What a simulator reported since the last call (its stats side channel), logged as ``sim/<name>``."""
        return {}

    def stop_value(self) -> float | None:
        """The return to stop at when the config sets none (the env's registered reward_threshold)."""
        return None

    def mirror_indices(self) -> EnvMirrorIndices | None:
        """The env's own mirror indices (``get_observation_mirror_indices()`` and
        ``get_action_mirror_indices()``, relayrl/envs/mirror_source.py), read when an algorithm's
        ``bind_env`` asks; None: the env gives none, or this experience has no env to read them from."""
        return None

    def close(self) -> None:
        """Close what the experience built (envs, evaluation envs)."""


def env_setup(config: RunConfig, on_policy: bool) -> dict[str, Any]:
    """The make_vec keyword arguments (manager included) for training and evaluation envs."""
    env = config.env
    manager, workers = env.manager, env.workers
    if manager == "async" and on_policy:
        raise ConfigError(f"{config.algo} needs every env at every step: use env.manager sync or subproc, "
                          "not async")
    if env.groups > 1:
        check_groups(config, manager)
    if manager == "auto" and picks_native(env.id, env.kwargs, env.wrapping()):
        manager = "native"
    elif manager == "auto" and env.groups > 1:  # (groups need envs that step while the policy acts)
        manager = "subproc"
    elif manager == "auto":
        manager, workers = choose_manager(env.id, env.num_envs, {**env.kwargs, **env.wrapping()}, env.workers)
    args: dict[str, Any] = dict(env_kwargs=env.kwargs, max_episode_steps=env.max_episode_steps,
                                wrapping=env.wrapping(), manager=manager, max_restarts=env.max_restarts)
    if manager in ("subproc", "async"):
        args.update(workers=workers, step_timeout=env.step_timeout)
    return args


def check_groups(config: RunConfig, manager: str) -> None:
    """Refuse ``env.groups`` > 1 where it cannot overlap anything, naming the fix."""
    env = config.env
    if env.num_envs % env.groups:
        raise ConfigError(f"env.num_envs={env.num_envs} does not split into env.groups={env.groups} equal groups: "
                          "make num_envs a multiple of groups")
    if manager in ("sync", "async"):
        raise ConfigError(f"env.groups={env.groups} needs envs that step while the policy acts, in worker processes "
                          f"or a native vector env, not manager {manager}: use env.manager subproc, native or auto")


def training_envs(config: RunConfig, env_args: dict[str, Any]) -> list[VectorEnv]:
    """The run's training envs: one vector env, or ``env.groups`` of them, env k of group g seeded as env
    ``g * num_envs/groups + k`` (training/double_buffer.py), the workers shared out."""
    env = config.env
    if env.groups == 1:
        return [make_vec(env.id, env.num_envs, **env_args)]
    size = env.num_envs // env.groups
    args = dict(env_args)
    if "workers" in args:
        args["workers"] = max(1, (args["workers"] or os.cpu_count() or 1) // env.groups)
    venvs: list[VectorEnv] = []
    try:
        for _ in range(env.groups):
            venvs.append(make_vec(env.id, size, **args))
    except BaseException:
        for venv in venvs:
            venv.close()
        raise
    return venvs


def read_env_mirror(config: RunConfig) -> EnvMirrorIndices | None:
    """The mirror indices of the run's env, from one env built as the run's are (closed at once)."""
    env = config.env
    return env_mirror_of(EnvMaker(env.id, env.kwargs, env.max_episode_steps, wrapping=env.wrapping()), env.id)


def make_eval_envs(config: RunConfig, env_args: dict[str, Any]) -> VectorEnv:
    return make_vec(config.env.id, min(config.eval.num_envs, config.eval.episodes), **env_args)


class GymExperience(Experience):
    """``config.env.num_envs`` Gymnasium envs collected in this process (through the env manager)."""

    def __init__(self, config: RunConfig, on_policy: bool):
        self.env_args = env_args = env_setup(config, on_policy)
        self.venvs = training_envs(config, env_args)
        self.venv = self.venvs[0]
        try:
            self.eval_venv = make_eval_envs(config, env_args)
        except BaseException:
            self._close_training_envs()
            raise
        self.observation_space = self.venv.single_observation_space
        self.action_space = self.venv.single_action_space
        self.columns = config.env.num_envs
        self.env_id = config.env.id
        self.config = config
        self.overlaps = config.overlap
        self.shares_policy = not self.overlaps  # (overlap: the collecting thread acts with a copy of its own)
        self._overlapped: OverlappedCollector | None = None

    def source(self, policy: Policy, cfg: Any, on_policy: bool) -> SampleSource:
        acting = copy.deepcopy(policy) if self.overlaps else policy  # (overlap: the thread's copy)
        collector = self._on_policy_collector(acting, cfg.num_steps) if on_policy else self._replay_collector(acting, cfg)
        if self.overlaps:
            self._overlapped = OverlappedCollector(collector)
            return self._overlapped
        return collector

    def evaluator(self, episodes: int, seed: int) -> Evaluation:
        return Evaluator(self.eval_venv, episodes, seed=seed)

    def _on_policy_collector(self, policy: Policy, num_steps: int) -> OnPolicyCollector | DoubleBufferedCollector:
        if len(self.venvs) > 1:
            return DoubleBufferedCollector(self.venvs, policy, num_steps)
        return OnPolicyCollector(self.venv, policy, num_steps)

    def _replay_collector(self, policy: Policy, cfg: Any) -> OffPolicyCollector | DoubleBufferedReplayCollector:
        n_step = cfg.n_step_for(agents=False)
        if len(self.venvs) > 1:
            return DoubleBufferedReplayCollector(self.venvs, policy, n_step, cfg.gamma, cfg.steps_per_iteration)
        return OffPolicyCollector(self.venv, policy, n_step, cfg.gamma, cfg.steps_per_iteration)

    def stats(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for venv in self.venvs:
            for key, value in venv.stats.items():
                totals[key] = totals.get(key, 0) + value
        return totals

    def stop_value(self) -> float | None:
        return native_stop_value(self.env_id) if self.env_args["manager"] == "native" else spec_stop_value(self.env_id)

    def mirror_indices(self) -> EnvMirrorIndices | None:
        return read_env_mirror(self.config)

    def close(self) -> None:
        try:
            if self._overlapped is not None:  # (its thread steps the envs)
                self._overlapped.close()
            self._close_training_envs()
        finally:
            self.eval_venv.close()

    def _close_training_envs(self) -> None:
        for venv in self.venvs:
            venv.close()


class EnvPair(Experience):
    """An env to train on and one to evaluate on, closed together; the training env's counters and the simulator's
    statistics (agent envs and ``BehaviourEnv``s: ``AgentExperience``, self-play's)."""

    env: Any
    eval_env: Any

    def stats(self) -> dict[str, float]:
        return dict(self.env.stats)

    def simulator_stats(self) -> dict[str, float]:
        return self.env.simulator_stats()

    def close(self) -> None:
        try:
            self.env.close()
        finally:
            self.eval_env.close()


class AgentExperience(EnvPair):
    """An agent env for training and one for evaluation: every agent is a row; on-policy rollouts
    are one column of every agent's steps in time order (``relayrl/training/agent_collectors.py``)."""

    agents = True
    columns = 1

    def __init__(self, env: AgentEnv, eval_env: AgentEnv):
        self.env, self.eval_env = env, eval_env
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space

    def source(self, policy: Policy, cfg: Any, on_policy: bool) -> SampleSource:
        return agent_collector(self.env, policy, cfg, on_policy)

    def evaluator(self, episodes: int, seed: int) -> Evaluation:
        return AgentEvaluator(self.eval_env, episodes, seed=seed)


class SourceExperience(Experience):
    """Experience from ``samples``, collected elsewhere (worker pools, the relay, your own queue).

    Evaluation runs on local envs of ``config.env.id`` (whose spaces the algorithm is then built
    for), or, with ``spaces`` given, on ``evaluator`` (e.g. a ``ReportedEvaluator`` of the episodes the
    collectors ran: the relay's test episodes, when the env exists only on the workers' machines).
    """

    shares_policy = False

    def __init__(self, config: RunConfig, samples: SampleSource, *,
                 spaces: tuple[gym.Space, gym.Space] | None = None, evaluator: Evaluation | None = None,
                 on_policy: bool = False):
        self.samples = samples
        self.eval_venv: VectorEnv | None = None
        self._evaluator = evaluator
        if spaces is None:
            self.eval_venv = make_eval_envs(config, env_setup(config, on_policy))
            spaces = (self.eval_venv.single_observation_space, self.eval_venv.single_action_space)
        elif evaluator is None:
            raise ConfigError("experience from a source with spaces of its own needs an evaluator: the run has no "
                              "env of its own to evaluate on")
        self.observation_space, self.action_space = spaces
        self.columns = config.env.num_envs * config.workers
        self.env_id = config.env.id
        self.config = config

    def stop_value(self) -> float | None:
        return spec_stop_value(self.env_id) if self.eval_venv is not None else None

    def mirror_indices(self) -> EnvMirrorIndices | None:
        """From a local env of the run, as the workers build theirs (the learner's own copy); refused
        when the run has none (``net.remote_env``): the indices cannot be read from here."""
        if self.eval_venv is None:
            raise ConfigError(f"mirror_spec auto: {self.env_id} has no built-in mirror spec, and this trainer has "
                              "no env of its own (net.remote_env / --remote-env) to read its "
                              "get_observation_mirror_indices() and get_action_mirror_indices() from: give "
                              "ppo.mirror_spec=FILE.yaml with obs: and act: lists")
        return read_env_mirror(self.config)

    def source(self, policy: Policy, cfg: Any, on_policy: bool) -> SampleSource:
        return self.samples

    def evaluator(self, episodes: int, seed: int) -> Evaluation:
        if self._evaluator is not None:
            return self._evaluator
        return Evaluator(self.eval_venv, episodes, seed=seed)

    def close(self) -> None:
        if self.eval_venv is not None:
            self.eval_venv.close()
