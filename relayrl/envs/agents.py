"""The agent env contract: any number of agents, each asking for a decision when it needs one.

Two kinds exist: a simulator's behaviour through the bridge (``relayrl.bridge.agent_env.BridgeAgents``)
and PettingZoo ParallelEnv copies (``relayrl.envs.multiagent.MultiAgentVectorEnv``). Their agents
are the rows of every batch the one shared policy sees::

    turn = env.reset(seed)                        # AgentTurn: who decides now, and who just ended
    while training:
        actions = policy.act(turn.obs, "collect").env_action     # one row per id in turn.ids
        turn = env.step(actions)

An ``AgentTurn`` holds the agents that want a decision now (ids, obs, the reward each earned since
its previous decision) and the agents whose episode ended since their last action (ids, final obs,
last reward, interrupted = cut by a step limit). An agent may be in both: it ended an episode and
began the next. Agents that skip turns simply keep their last action pending. ``action_mask`` holds the
actions each deciding agent may take (True = allowed, relayrl/envs/masks.py), or None. An id belongs to one
live agent at a time; the collectors key what an agent owes them by id, so an env may reuse an id
once its agent has ended (both kinds do). Observations are one array of rows (a Dict observation is
packed into one uint8 row per agent first, ``relayrl/envs/packed.py``).
``relayrl/training/agent_collectors.py`` turns turns into rollouts and transitions.

A ``BehaviourEnv`` holds several *behaviours* stepped together, each a group of agents with spaces of
its own and a policy of its own (a simulator's scene, a two-player game): ``reset`` and ``step`` take
and give one entry per behaviour. ``OneBehaviour`` is one of them as an ``AgentEnv`` (the others get
the env's default answer)::

    turns = env.reset(seed)                        # {name: AgentTurn}
    while training:
        turns = env.step({name: policies[name].act(t.obs, "collect").env_action for name, t in turns.items()})
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping

import gymnasium as gym
import numpy as np

__all__ = ["AgentEnv", "AgentTurn", "Behaviour", "BehaviourEnv", "OneBehaviour"]


@dataclass
class AgentTurn:
    ids: np.ndarray  # [n] int64, agents that want a decision
    obs: np.ndarray  # [n, ...]
    reward: np.ndarray  # [n] float32, earned since each agent's previous decision
    end_ids: np.ndarray  # [m] int64, agents whose episode ended
    end_obs: np.ndarray  # [m, ...] final observations
    end_reward: np.ndarray  # [m]
    interrupted: np.ndarray  # [m] bool: truncated (step limit), not terminal
    action_mask: np.ndarray | None = None  # [n, width] bool, True = allowed (None: the env gives no masks)


class Reports:
    """What both kinds of agent env report besides turns, and their release."""

    @property
    def stats(self) -> dict[str, Any]:
        """Counters to log with every iteration (``env/<name>``)."""
        return {}

    def simulator_stats(self) -> dict[str, float]:
        """Named scalars the simulator reported since the last call, aggregated (``sim/<name>``)."""
        return {}

    def close(self) -> None:
        """Release what the env holds (processes, shared memory)."""


class AgentEnv(Reports, ABC):
    """Agents as rows. ``num_envs`` is the most agents it can have at once."""

    single_observation_space: gym.Space
    single_action_space: gym.Space
    num_envs: int

    @abstractmethod
    def reset(self, seed: int | None = None) -> AgentTurn:
        """Start new episodes for every agent; the first decisions."""

    @abstractmethod
    def step(self, actions: np.ndarray) -> AgentTurn:
        """Actions for the ids of the previous turn, in its order; the next turn."""


@dataclass(frozen=True)
class Behaviour:
    """One behaviour's spaces and the most agents it can have at once."""

    observation_space: gym.Space
    action_space: gym.Space
    num_envs: int


class BehaviourEnv(Reports, ABC):
    """Several behaviours stepped together (module docstring). ``behaviours`` is fixed after construction."""

    behaviours: dict[str, Behaviour]

    @abstractmethod
    def reset(self, seed: int | None = None) -> dict[str, AgentTurn]:
        """Start new episodes for every agent of every behaviour; the first decisions of each."""

    @abstractmethod
    def step(self, actions: Mapping[str, np.ndarray]) -> dict[str, AgentTurn]:
        """``actions[name]``: one row per id of that behaviour's previous turn, in its order; a behaviour left
        out gets the env's default answer. The next turn of every behaviour."""


class OneBehaviour(AgentEnv):
    """Behaviour ``name`` of ``env`` as an agent env; the other behaviours get the env's default answer."""

    def __init__(self, env: BehaviourEnv, name: str):
        self.env, self.name = env, name
        behaviour = env.behaviours[name]
        self.single_observation_space = behaviour.observation_space
        self.single_action_space = behaviour.action_space
        self.num_envs = behaviour.num_envs

    def reset(self, seed: int | None = None) -> AgentTurn:
        return self.env.reset(seed)[self.name]

    def step(self, actions: np.ndarray) -> AgentTurn:
        return self.env.step({self.name: actions})[self.name]

    @property
    def stats(self) -> dict[str, Any]:
        return self.env.stats

    def simulator_stats(self) -> dict[str, float]:
        return self.env.simulator_stats()

    def close(self) -> None:
        self.env.close()
