"""REINFORCE with a learned baseline, written only against relayrl's contracts (docs/library.md).

    relayrl config examples.reinforce:reinforce
    relayrl train examples.reinforce:reinforce --env CartPole-v1 --backend mp --workers 2

``relayrl train`` imports this module by name in every process (the learner, mp and Ray rollout
workers, ``relayrl eval``), so it must be importable there: run from the repository root or put it on
PYTHONPATH. Importing it calls ``register`` below, which files the algorithm under
``examples.reinforce:reinforce``; its options are the ``reinforce:`` section of the config.

The update is the policy gradient of the discounted return to go, minus a learned baseline V(obs),
on each [T, N] rollout that on-policy collection delivers; where the rollout cuts an episode (its
end, or a time limit) the return bootstraps from the critic's ``next_value``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field
from torch import nn

from relayrl.algos import register
from relayrl.config import AlgoConfig
from relayrl.core import Algorithm, Policy
from relayrl.errors import EnvError
from relayrl.types import Batch, Mode, PolicyOutput


class ReinforceConfig(AlgoConfig):
    num_steps: int = Field(64, ge=1)
    """Vector steps collected per update (the rollout holds num_steps x env.num_envs steps)."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    lr: float = Field(3e-3, gt=0.0)
    """Adam learning rate of the policy and the baseline."""
    hidden: int = Field(64, ge=1)
    """Units of the two hidden layers of each network."""
    entropy_coef: float = Field(0.01, ge=0.0)
    """Weight of the entropy bonus."""


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, outputs))


class ReinforcePolicy(Policy):
    """A categorical policy over a Discrete action space, with a critic V(obs) as its baseline."""

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: ReinforceConfig):
        if not isinstance(obs_space, gym.spaces.Box) or not isinstance(act_space, gym.spaces.Discrete):
            raise EnvError(f"reinforce needs Box observations and Discrete actions, got {obs_space}, {act_space}")
        self.observation_space, self.action_space = obs_space, act_space
        self.action_shape, self.action_dtype, self.obs_dtype = (), np.dtype(np.int64), np.dtype(np.float32)
        size = int(np.prod(obs_space.shape))
        self.actor, self.critic = mlp(size, cfg.hidden, int(act_space.n)), mlp(size, cfg.hidden, 1)
        self.version = 0

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs.reshape(len(obs), -1))

    @torch.no_grad()
    def act(self, obs: np.ndarray, mode: Mode = "collect") -> PolicyOutput:
        x = np.asarray(obs, np.float32)
        logits = self.logits(torch.from_numpy(x))
        if mode == "eval":
            action = logits.argmax(-1).numpy()
            return PolicyOutput(action=action, env_action=action, obs=x)
        action = torch.distributions.Categorical(logits=logits).sample()
        logp = torch.log_softmax(logits, -1).gather(-1, action[:, None])[:, 0]
        return PolicyOutput(action=action.numpy(), env_action=action.numpy(), logp=logp.numpy(),
                            value=self.value(x), obs=x)

    @torch.no_grad()
    def value(self, obs: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        x = torch.as_tensor(np.asarray(obs, np.float32))
        return self.critic(x.reshape(len(x), -1))[:, 0].numpy()

    def get_weights(self) -> dict[str, Any]:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict()}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.actor.load_state_dict(weights["actor"])
        self.critic.load_state_dict(weights["critic"])
        if version is not None:
            self.version = version


def returns_to_go(rollout: Batch, gamma: float) -> np.ndarray:
    """Discounted returns of a [T, N] rollout: cut where episodes terminate, bootstrapped from
    ``next_value`` where the rollout ends or a time limit truncates them."""
    reward, terminated, truncated = rollout["reward"], rollout["terminated"], rollout["truncated"]
    out, running = np.zeros_like(reward, dtype=np.float32), rollout["next_value"][-1]
    for t in reversed(range(len(reward))):
        following = np.where(truncated[t], rollout["next_value"][t], running)
        running = out[t] = reward[t] + gamma * following * ~terminated[t]
    return out


class Reinforce(Algorithm):
    def __init__(self, cfg: ReinforceConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg, self.policy = cfg, ReinforcePolicy(obs_space, act_space, cfg)
        params = [*self.policy.actor.parameters(), *self.policy.critic.parameters()]
        self.optim = torch.optim.Adam(params, lr=cfg.lr)

    def learn(self, rollout: Batch, progress: float = 0.0) -> dict[str, float]:
        obs = torch.as_tensor(rollout["obs"], dtype=torch.float32).flatten(0, 1)
        action = torch.as_tensor(rollout["action"]).flatten(0, 1)
        ret = torch.as_tensor(returns_to_go(rollout, self.cfg.gamma)).flatten()
        value = self.policy.critic(obs.reshape(len(obs), -1))[:, 0]
        advantage = ret - value.detach()
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        logp_all = torch.log_softmax(self.policy.logits(obs), -1)
        logp = logp_all.gather(-1, action[:, None])[:, 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        policy_loss = -(logp * advantage).mean()
        value_loss = 0.5 * (ret - value).pow(2).mean()
        self.optim.zero_grad()
        (policy_loss + value_loss - self.cfg.entropy_coef * entropy).backward()
        self.optim.step()
        self.policy.version += 1
        return {"loss/policy": policy_loss.item(), "loss/value": value_loss.item(), "entropy": entropy.item()}

    def state_dict(self) -> dict[str, Any]:
        return {**self.policy.get_weights(), "version": self.policy.version, "optim": self.optim.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.optim.load_state_dict(state["optim"])


register("reinforce", ReinforceConfig, Reinforce, ReinforcePolicy, on_policy=True)
