# examples/robot/algorithm.py
"""The robot's training agent (TMRL's TrainingAgent): DDPG, written against relayrl's contracts and registered by
reference as "examples.robot.algorithm:ddpg"; its options are the config's ``ddpg:`` section.

The policy acts (the worker builds it alone); the algorithm owns the policy and a critic, and learns from replay
minibatches (obs, action, reward, next_obs, terminated, discount).
"""

import copy

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field

from examples.robot.network import Actor, Critic
from relayrl.algos import register
from relayrl.core import Algorithm, Policy
from relayrl.errors import EnvError
from relayrl.options import ReplayLoopConfig
from relayrl.types import PolicyOutput


class DDPGConfig(ReplayLoopConfig):
    start_training: int = Field(500, ge=0)
    """Transitions in the buffer before the first update (uniform random actions until then)."""
    batch_size: int = Field(128, ge=1)
    """Minibatch size per update."""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate of the actor and the critic."""
    tau: float = Field(0.01, gt=0, le=1)
    """Target networks' smoothing per update."""
    noise: float = Field(0.2, ge=0)
    """Standard deviation of the exploration noise added to the actor's action when collecting."""
    hidden: int = Field(64, ge=1)
    """Units of the two hidden layers of each network."""


class DDPGPolicy(Policy):
    def __init__(self, obs_space, act_space, cfg):
        if not isinstance(obs_space, gym.spaces.Box) or not isinstance(act_space, gym.spaces.Box):
            raise EnvError(f"ddpg needs Box observations and actions, got {obs_space}, {act_space}")
        self.observation_space, self.action_space = obs_space, act_space
        self.action_shape, self.action_dtype = act_space.shape, np.dtype(np.float32)
        self.obs_dtype = np.dtype(np.float32)
        self.actor = Actor(int(np.prod(obs_space.shape)), int(np.prod(act_space.shape)), cfg.hidden)
        self.low, self.half = act_space.low, (act_space.high - act_space.low) / 2
        self.noise, self.start_training, self.random_actions = cfg.noise, cfg.start_training, cfg.start_training > 0
        self.rng = np.random.default_rng()
        self.version = 0

    @torch.no_grad()
    def act(self, obs, mode="collect"):
        obs = torch.as_tensor(np.asarray(obs, np.float32)).reshape(len(obs), -1)
        if mode == "collect" and self.random_actions:
            action = self.rng.uniform(-1, 1, (len(obs), *self.action_shape)).astype(np.float32)
        else:
            action = self.actor(obs).numpy().reshape(len(obs), *self.action_shape)
            if mode == "collect":
                action = np.clip(action + self.rng.normal(0, self.noise, action.shape), -1, 1).astype(np.float32)
        return PolicyOutput(action=action, env_action=self.low + (action + 1) * self.half)

    def set_progress(self, env_steps, total_steps):
        self.random_actions = env_steps < self.start_training

    def get_weights(self):
        return {"actor": self.actor.state_dict()}

    def set_weights(self, weights, version=None):
        self.actor.load_state_dict(weights["actor"])
        if version is not None:
            self.version = version


class DDPG(Algorithm):
    def __init__(self, cfg, obs_space, act_space, num_envs):
        self.cfg, self.policy = cfg, DDPGPolicy(obs_space, act_space, cfg)
        self.critic = Critic(int(np.prod(obs_space.shape)), int(np.prod(act_space.shape)), cfg.hidden)
        self.target_actor = copy.deepcopy(self.policy.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optim = torch.optim.Adam(self.policy.actor.parameters(), lr=cfg.lr)
        self.critic_optim = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr)

    def learn(self, batch, progress=0.0):
        n = len(batch["obs"])
        obs, next_obs = (torch.as_tensor(batch[k], dtype=torch.float32).reshape(n, -1) for k in ("obs", "next_obs"))
        action = torch.as_tensor(batch["action"], dtype=torch.float32).reshape(n, -1)
        reward, discount, terminated = (torch.as_tensor(batch[k], dtype=torch.float32)
                                        for k in ("reward", "discount", "terminated"))
        with torch.no_grad():  # y = r + gamma^m (1 - terminated) Q'(s', mu'(s'))
            y = reward + discount * (1 - terminated) * self.target_critic(next_obs, self.target_actor(next_obs))
        critic_loss = (self.critic(obs, action) - y).pow(2).mean()
        self.critic_optim.zero_grad()
        critic_loss.backward()
        self.critic_optim.step()
        actor_loss = -self.critic(obs, self.policy.actor(obs)).mean()
        self.actor_optim.zero_grad()
        actor_loss.backward()
        self.actor_optim.step()
        with torch.no_grad():
            for target, net in ((self.target_actor, self.policy.actor), (self.target_critic, self.critic)):
                for t, p in zip(target.parameters(), net.parameters()):
                    t.lerp_(p, self.cfg.tau)
        self.policy.version += 1
        return {"loss/critic": critic_loss.item(), "loss/actor": actor_loss.item()}

    def state_dict(self):
        return {**self.policy.get_weights(), "version": self.policy.version, "critic": self.critic.state_dict(),
                "target_actor": self.target_actor.state_dict(), "target_critic": self.target_critic.state_dict(),
                "actor_optim": self.actor_optim.state_dict(), "critic_optim": self.critic_optim.state_dict()}

    def load_state_dict(self, state):
        self.policy.set_weights(state, version=int(state["version"]))
        for name in ("critic", "target_actor", "target_critic", "actor_optim", "critic_optim"):
            getattr(self, name).load_state_dict(state[name])


register("ddpg", DDPGConfig, DDPG, DDPGPolicy, on_policy=False)
