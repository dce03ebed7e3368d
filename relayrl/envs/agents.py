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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["AgentEnv", "AgentTurn"]


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


class AgentEnv(ABC):
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

    @property
    def stats(self) -> dict[str, Any]:
        """Counters to log with every iteration (``env/<name>``)."""
        return {}

    def simulator_stats(self) -> dict[str, float]:
        """Named scalars the simulator reported since the last call, aggregated (``sim/<name>``)."""
        return {}

    def close(self) -> None:
        """Release what the env holds (processes, shared memory)."""
