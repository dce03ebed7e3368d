"""Implicit Q-Learning (Kostrikov, Nair and Levine 2022, "Offline RL with Implicit Q-Learning"): offline, Box
actions, learned from a dataset without ever querying an action outside it.

- V(s) by expectile regression toward min Q_target(s, a) of the dataset's actions (expectile tau > 0.5 leans
  toward the best actions the data holds);
- twin Q(s, a) toward r + gamma (1 - terminated) V(s'), with a Polyak-averaged target;
- the actor by advantage-weighted regression: maximise exp(beta (Q_target(s, a) - V(s))) log pi(a | s) over the
  dataset's actions, the weights clipped at 100.

As CORL's iql.py (which follows the paper's code): the three losses are computed from the networks as they were
before the update (V of s' for the Q target, the advantage for the actor), so here they touch disjoint
parameters and take one backward pass and one fused Adam step. Defaults: the paper's locomotion ones (expectile
0.7, beta 3.0, batch 256, tau 0.005, gamma 0.99) but Pendulum's sizes, as relayrl's SAC: 64x64 networks and Adam
1e-3 (the paper's 3e-4 needed about three times the updates on Pendulum; use it with 256x256 on MuJoCo), and
rewards scaled by 0.1 (``reward_scale``, as CORL normalises them). The
actor is CORL's Gaussian with a state-independent log std and a tanh mean (in [-1, 1], scaled to the bounds).

Reads top to bottom: config, networks, policy, the algorithm, registration.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field
from torch import nn

from relayrl.algos.bc import network
from relayrl.algos.registry import register
from relayrl.algos.sac import BoundedActionGraph, EncodedTwinQ, TwinQ
from relayrl.core import Algorithm, Policy
from relayrl.data.datasets import action_bounds
from relayrl.data.dtypes import stored_dtype, to_tensor
from relayrl.errors import EnvError, NonFiniteError
from relayrl.options import OfflineConfig
from relayrl.policy.device import cpu_state, cpu_tree
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.encoders import check_space, make_encoder
from relayrl.policy.graph import ObservationInput, PolicyGraph
from relayrl.types import Batch, Mode, PolicyOutput

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # (CORL's)
EXP_ADV_MAX = 100.0  # the actor's weights are clipped here (the paper's code, CORL)


class IQLConfig(OfflineConfig):
    aliases = {"learning_rate": "actor_lr,critic_lr,value_lr", "net_arch": "hidden_sizes", "iql_tau": "expectile",
               "temperature": "beta", "discount": "gamma", "features_extractor_class": "encoder"}

    expectile: float = Field(0.7, gt=0, lt=1)
    """Expectile of the value regression (0.5: the mean, SARSA; toward 1: the best action in the data)."""
    beta: float = Field(3.0, ge=0)
    """Inverse temperature of the advantage weights exp(beta * A) (0: behaviour cloning)."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    tau: float = Field(0.005, gt=0, le=1)
    """Target Q smoothing per update."""
    actor_lr: float = Field(1e-3, gt=0)
    """Actor learning rate (Adam)."""
    critic_lr: float = Field(1e-3, gt=0)
    """Q networks' learning rate (Adam)."""
    value_lr: float = Field(1e-3, gt=0)
    """Value network's learning rate (Adam)."""
    actor_cosine: bool = True
    """Anneal the actor's learning rate to 0 over total_steps by a cosine (CORL's iql.py): the policy settles
    instead of following the critics' noise to the last update."""
    reward_scale: float = Field(0.1, gt=0)
    """Rewards are multiplied by this before learning: the advantages' scale meets beta. 0.1 brings Pendulum's
    rewards (down to -16 a step) to the order of 1 that CORL's normalised locomotion rewards have (returns scaled
    to a range of 1000 over 1000 steps); at 1.0 its advantages' noise saturates the weights and the policy
    degrades with longer training on small datasets. Set it so a step's reward is about 1 in magnitude."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor, of each Q network and of the value network (64x64, as relayrl's SAC, for
    Pendulum: a quarter of the paper's 256x256 cost per update on a CPU; use 256x256 for MuJoCo tasks)."""
    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; the actor, the twin Q
    networks (one shared) and the value network each get one; hidden_sizes sizes the heads. null: the built-in
    choice from the observation space (a CNN for images, one-hot for Discrete, an MLP on flat observations)."""


# ---------------------------------------------------------------- networks


class GaussianActor(nn.Module):
    """A Gaussian over actions in [-1, 1]: mean tanh(net(obs)), a learned log std per action dimension."""

    def __init__(self, net: nn.Module, act_dim: int):
        super().__init__()
        self.net = net
        self.log_std = nn.Parameter(torch.zeros(act_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """log pi(action | obs), summed over the action's dimensions: [n]."""
        mean, log_std = self(obs), self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        return (-0.5 * ((action - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


# ---------------------------------------------------------------- policy


class IQLPolicy(Policy):
    """The actor's mean in "eval"; in "collect", a sample of its Gaussian clipped to [-1, 1]. Actions are learned
    in [-1, 1] and scaled to the env's bounds for ``env_action``."""

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: IQLConfig):
        if not isinstance(act_space, gym.spaces.Box):
            raise EnvError(f"IQL learns continuous (Box) actions, got {act_space}: use bc for Discrete actions, or "
                           "collect data for an online algorithm (dqn, ppo)")
        check_space(obs_space, "iql.encoder")
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_dtype = stored_dtype(obs_space.dtype)
        self.low, self.scale = action_bounds(act_space, "IQL")
        self.act_dim = int(np.prod(act_space.shape))
        self.action_shape, self.action_dtype = tuple(act_space.shape), np.dtype(np.float32)
        net, self.obs_view = network(cfg.encoder, obs_space, act_space, cfg.hidden_sizes, self.act_dim, "iql.encoder")
        self.actor = GaussianActor(net, self.act_dim)
        self.version = 0

    def observations(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Stored observations as the networks read them: float32 on the device, flattened or [n, *obs_shape]."""
        x = obs if isinstance(obs, torch.Tensor) else to_tensor(obs, self.device)
        return x.reshape(len(x), *self.obs_view)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect") -> PolicyOutput:
        mean = self.actor(self.observations(obs))
        if mode == "collect":
            std = self.actor.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
            mean = (mean + std * torch.randn_like(mean)).clamp(-1.0, 1.0)
        action = mean.cpu().numpy().reshape(len(obs), *self.action_shape)
        return PolicyOutput(action=action, env_action=self.low + (action + 1) * self.scale)

    def export_graph(self) -> PolicyGraph:
        """``predict`` as one module for ``relayrl export``: the actor's mean, scaled to the bounds."""
        graph = BoundedActionGraph(ObservationInput(None, self.obs_view), self.actor, self.action_shape, self.low,
                                   self.scale)
        return PolicyGraph(graph, "tanh mean scaled to the action bounds")

    def get_weights(self) -> dict[str, Any]:
        return {"actor": cpu_state(self.actor)}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.actor.load_state_dict(weights["actor"])
        if version is not None:
            self.version = version


# ---------------------------------------------------------------- algorithm


class IQL(Algorithm):
    """``learn(batch)`` takes a minibatch of the dataset (obs, action, reward, next_obs, terminated)."""

    devices = ("cpu", "cuda")

    def __init__(self, cfg: IQLConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = policy = IQLPolicy(obs_space, act_space, cfg)
        encoder = make_encoder(cfg.encoder, obs_space, act_space, "iql.encoder")
        if encoder is None:
            self.critic: TwinQ = TwinQ(int(np.prod(obs_space.shape)) + policy.act_dim, cfg.hidden_sizes)
        else:  # one encoder for both Q networks, as SAC's
            self.critic = EncodedTwinQ(*encoder, policy.act_dim, cfg.hidden_sizes)
        self.target = copy.deepcopy(self.critic).requires_grad_(False)
        self.value, _ = network(cfg.encoder, obs_space, act_space, cfg.hidden_sizes, 1, "iql.encoder")
        # the three losses touch disjoint parameters: one backward pass, one fused step with a group each
        self.optim = torch.optim.Adam([{"params": list(policy.actor.parameters()), "lr": cfg.actor_lr},
                                       {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
                                       {"params": list(self.value.parameters()), "lr": cfg.value_lr}], fused=True)
        self.updates = 0
        self.done = 0.0  # the fraction of total_steps done when the round began (set_progress)

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        """Offline: the updates done and total_steps (training/offline.py), for the actor's cosine schedule."""
        self.done = min(1.0, env_steps / total_steps) if total_steps else 0.0

    def to(self, device: torch.device) -> None:
        self.device = self.policy.device = device
        for net in (self.policy.actor, self.critic, self.target, self.value):
            net.to(device)

    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, device, policy = self.cfg, self.device, self.policy
        n = len(batch["obs"])
        obs, next_obs = policy.observations(batch["obs"]), policy.observations(batch["next_obs"])
        action = to_tensor(batch["action"], device).reshape(n, -1)
        with torch.no_grad():
            target_q = self.target(obs, action).min(0).values
            next_v = self.value(next_obs).squeeze(-1)
            not_done = 1.0 - to_tensor(batch["terminated"], device)
            y = cfg.reward_scale * to_tensor(batch["reward"], device) + cfg.gamma * not_done * next_v
        # ---- value: expectile regression toward min Q_target(s, a): |expectile - 1(u < 0)| u^2
        v = self.value(obs).squeeze(-1)
        advantage = target_q - v
        value_loss = (torch.abs(cfg.expectile - (advantage < 0).float()) * advantage.pow(2)).mean()
        # ---- Q: toward r + gamma (1 - terminated) V(s'), both networks
        q = self.critic(obs, action)
        q_loss = (q - y).pow(2).mean()
        # ---- actor: advantage-weighted log-likelihood of the dataset's actions
        weight = torch.exp(cfg.beta * advantage.detach()).clamp(max=EXP_ADV_MAX)
        actor_loss = -(weight * policy.actor.log_prob(obs, action)).mean()
        loss = value_loss + q_loss + actor_loss
        if cfg.actor_cosine:  # where the round began (set_progress), not where the loop counts it ended
            self.optim.param_groups[0]["lr"] = cfg.actor_lr * 0.5 * (1.0 + math.cos(math.pi * self.done))
        if not torch.isfinite(loss):
            raise NonFiniteError(f"IQL loss became {loss.item()} (value {value_loss.item()}, Q {q_loss.item()}, actor "
                                 f"{actor_loss.item()}): lower the learning rates or iql.reward_scale")
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target.parameters()), list(self.critic.parameters()), cfg.tau)
        self.updates += 1
        policy.version += 1
        return {"loss/value": value_loss.item(), "loss/q": q_loss.item(), "loss/actor": actor_loss.item(),
                "advantage_mean": advantage.mean().item(), "q_mean": q.mean().item(), "updates": 1.0}

    def state_dict(self) -> dict[str, Any]:
        return cpu_tree({**self.policy.get_weights(), "critic": self.critic.state_dict(),
                         "target": self.target.state_dict(), "value": self.value.state_dict(),
                         "optim": self.optim.state_dict(), "updates": self.updates, "version": self.policy.version})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.critic.load_state_dict(state["critic"])
        self.target.load_state_dict(state["target"])
        self.value.load_state_dict(state["value"])
        self.optim.load_state_dict(state["optim"])
        self.updates = int(state["updates"])


register("iql", IQLConfig, IQL, IQLPolicy, on_policy=False, offline=True,
         defaults={"env": {"id": "Pendulum-v1", "num_envs": 1}, "total_steps": 20_000, "eval": {"freq": 2000}})
