"""Multi-agent envs as batches: every live agent of one or more PettingZoo ParallelEnvs is a row.

One shared policy acts for all rows. Each step returns two blocks, like a simulator that asks for
decisions (the shape the simulator bridge uses too):

- the *transitions* of the agents that acted, in the order of the actions sent: reward,
  terminated, truncated, and ``final_obs`` for the agents whose episode ended;
- the *decision batch* for the next step: observations of every live agent, with ``env_ids``
  (which env copy) and ``agent_ids`` (its name). Agents that appeared this step are in it without
  a transition; agents that left are not.

An env copy whose agents are all gone is reset in place (autoreset), its new agents joining the
next decision batch.

    venv = MultiAgentVectorEnv([lambda: my_parallel_env()] * 4)
    batch = venv.reset(seed=0)
    while training:
        out = venv.step(policy.act(batch.obs))      # one action per row of the decision batch
        store(out.transitions); batch = out.next
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.envs import spaces
from relayrl.envs.vector import ActionSpec, check_actions
from relayrl.errors import EnvError


@dataclass
class DecisionBatch:
    obs: Any  # [rows, ...] (dict/tuple of arrays for Dict/Tuple spaces)
    env_ids: np.ndarray  # env copy of each row
    agent_ids: list[str]


@dataclass
class Transitions:
    env_ids: np.ndarray
    agent_ids: list[str]
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: Any  # rows valid where terminated | truncated
    info: list[dict] = field(default_factory=list)


@dataclass
class MultiAgentStep:
    transitions: Transitions
    next: DecisionBatch


class MultiAgentVectorEnv:
    """PettingZoo ParallelEnv copies as one batch of agents (see module docstring)."""

    def __init__(self, factories: list[Callable[[], Any]]):
        if not factories:
            raise EnvError("a multi-agent vector env needs at least one env")
        self.envs = [factory() for factory in factories]
        first = self.envs[0]
        agents = list(first.possible_agents)
        if not agents:
            raise EnvError("the env declares no possible_agents")
        self.single_observation_space = first.observation_space(agents[0])
        self.single_action_space = first.action_space(agents[0])
        for env in self.envs:
            for agent in env.possible_agents:
                if env.observation_space(agent) != self.single_observation_space or \
                        env.action_space(agent) != self.single_action_space:
                    raise EnvError(f"agent {agent!r} has spaces {env.observation_space(agent)} / "
                                   f"{env.action_space(agent)}, unlike {agents[0]!r}: one shared policy needs "
                                   "the same observation and action space for every agent")
        spaces.leaves(self.single_observation_space)  # refuses unsupported spaces clearly
        self._action_spec = ActionSpec(self.single_action_space)
        self._obs: list[dict[str, Any]] = [{} for _ in self.envs]
        self._rows: list[tuple[int, str]] = []

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    def _batch(self) -> DecisionBatch:
        self._rows = [(i, agent) for i, env in enumerate(self.envs) for agent in env.agents]
        return DecisionBatch(obs=self._stack([self._obs[i][a] for i, a in self._rows]),
                             env_ids=np.array([i for i, _ in self._rows], dtype=np.int64),
                             agent_ids=[a for _, a in self._rows])

    def _stack(self, values: list[Any]) -> Any:
        arrays, _ = spaces.allocate(self.single_observation_space, len(values))
        for row, value in enumerate(values):
            for array, leaf in zip(arrays, spaces.flatten(self.single_observation_space, value)):
                array[row] = leaf
        return spaces.build(self.single_observation_space, arrays)

    def reset(self, seed: int | None = None) -> DecisionBatch:
        for i, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seed is None else seed + i)
            self._obs[i] = dict(obs)
        return self._batch()

    def step(self, actions: np.ndarray) -> MultiAgentStep:
        """Actions for the rows of the last decision batch, in its order."""
        if not self._rows and not any(env.agents for env in self.envs):
            raise EnvError("step() before reset(): call reset(seed) first")
        actions = check_actions(self._action_spec, actions, len(self._rows))
        per_env: list[dict[str, Any]] = [{} for _ in self.envs]
        discrete = isinstance(self.single_action_space, gym.spaces.Discrete)
        for (i, agent), action in zip(self._rows, actions):
            per_env[i][agent] = int(action) if discrete else action
        n = len(self._rows)
        reward, term, trunc = np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)
        final: list[Any] = [None] * n
        infos: list[dict] = [{} for _ in range(n)]
        results = []
        for i, env in enumerate(self.envs):
            results.append(env.step(per_env[i]) if per_env[i] else ({}, {}, {}, {}, {}))
        for row, (i, agent) in enumerate(self._rows):
            obs, rew, terminated, truncated, info = results[i]
            reward[row] = rew.get(agent, 0.0)
            term[row], trunc[row] = bool(terminated.get(agent, False)), bool(truncated.get(agent, False))
            infos[row] = info.get(agent, {}) or {}
            if term[row] or trunc[row]:
                final[row] = obs.get(agent, self._obs[i][agent])
        filler = self._obs[self._rows[0][0]][self._rows[0][1]] if n else None
        final_obs = self._stack([f if f is not None else filler for f in final]) if n else self._stack([])
        transitions = Transitions(env_ids=np.array([i for i, _ in self._rows], dtype=np.int64),
                                  agent_ids=[a for _, a in self._rows], reward=reward, terminated=term,
                                  truncated=trunc, final_obs=final_obs, info=infos)
        for i, env in enumerate(self.envs):
            obs = results[i][0]
            if not env.agents:  # every agent is gone: the episode of this copy is over
                obs, _ = env.reset()
                self._obs[i] = dict(obs)
            else:
                self._obs[i] = {agent: obs[agent] if agent in obs else self._obs[i][agent] for agent in env.agents}
        return MultiAgentStep(transitions=transitions, next=self._batch())

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def __enter__(self) -> "MultiAgentVectorEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
