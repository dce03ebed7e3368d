"""TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods"): a deterministic
actor, twin critics with a clipped double-Q target, target policy smoothing and delayed actor and target updates;
continuous actions.

Reads top to bottom: config, networks (the twin critic is SAC's TwinQ: one stacked network), policy (Gaussian
exploration noise on collect, the actor's action on eval), the algorithm, registration.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field
from torch import nn

from relayrl.algos.registry import register
from relayrl.algos.sac import (BoundedActionGraph, EncodedTwinQ, SACPolicy, TwinQ, bootstrap_target, replay_tensors,
                               sample_weights)
from relayrl.core import Algorithm
from relayrl.data.dtypes import to_tensor
from relayrl.errors import NonFiniteError
from relayrl.options import ReplayLoopConfig
from relayrl.policy.device import cpu_tree
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.encoders import make_encoder
from relayrl.policy.graph import ObservationInput, PolicyGraph
from relayrl.policy.networks import mlp
from relayrl.types import Batch, Mode, PolicyOutput


class TD3Config(ReplayLoopConfig):
    """Defaults: the paper's and SB3's (lr 1e-3, tau 0.005, policy_delay 2, target noise 0.2 clipped at 0.5), RL Zoo's
    Pendulum exploration noise (0.1), SAC's 64x64 networks (they learn Pendulum as fast as 400x300, at a fraction of
    the cost per update)."""

    aliases: ClassVar[dict[str, str]] = {
        "learning_rate": "actor_lr,critic_lr", "learning_starts": "start_training", "net_arch": "hidden_sizes",
        "train_freq": "steps_per_iteration", "gradient_steps": "updates_per_step", "action_noise":
        "exploration_noise", "target_noise_clip": "noise_clip", "features_extractor_class": "encoder"}

    start_training: int = Field(1000, ge=0)
    """Transitions in the buffer before the first update (uniform random actions until then)."""
    tau: float = Field(0.005, gt=0, le=1)
    """Target networks' smoothing per actor update."""
    actor_lr: float = Field(1e-3, gt=0)
    """Actor learning rate (Adam)."""
    critic_lr: float = Field(1e-3, gt=0)
    """Critic learning rate (Adam)."""
    policy_delay: int = Field(2, ge=1)
    """Update the actor and the target networks once every this many critic updates."""
    exploration_noise: float = Field(0.1, ge=0)
    """Standard deviation of the Gaussian noise added to the actor's action when collecting, in units of half
    the action range (actions are learned in [-1, 1])."""
    target_policy_noise: float = Field(0.2, ge=0)
    """Standard deviation of the noise added to the target actor's action in the critics' target (smoothing)."""
    noise_clip: float = Field(0.5, ge=0)
    """That target noise is clipped to [-noise_clip, noise_clip]."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor and of each critic."""
    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; the actor gets one, the
    twin critics share another (their heads stay two), the targets are copies; hidden_sizes sizes the heads
    (docs/library.md, "Your own network"). null: the built-in choice from the observation space (docs/library.md,
    "Built-in encoders"): a CNN for images, one-hot for Discrete and MultiDiscrete, MLPs on flat observations."""

    def timing_sizes(self) -> tuple[list[int], int]:
        return list(self.hidden_sizes), self.batch_size


# ---------------------------------------------------------------- networks


class DeterministicActor(nn.Module):
    """obs -> tanh(MLP) in [-1, 1], on the features of an encoder when one is given."""

    def __init__(self, in_dim: int, act_dim: int, hidden: list[int], encoder: nn.Module | None = None):
        super().__init__()
        self.encoder = encoder
        self.net = mlp(in_dim, hidden, act_dim, "relu")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs if self.encoder is None else self.encoder(obs)))


# ---------------------------------------------------------------- policy


class TD3Policy(SACPolicy):
    """The actor's action plus Gaussian noise (clipped to [-1, 1]) in "collect" mode, the actor's action in "eval";
    actions are scaled to the env's bounds for ``env_action``. Uniform random actions until ``start_training``.
    SAC's policy (spaces, encoders, scaling, weights) with a deterministic actor."""

    label: ClassVar[str] = "TD3"
    section: ClassVar[str] = "td3"

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: TD3Config):
        super().__init__(obs_space, act_space, cfg)
        self.noise = cfg.exploration_noise

    def make_actor(self, obs_dim: int, encoder: tuple[nn.Module, int] | None, cfg: TD3Config) -> DeterministicActor:
        if encoder is None:
            return DeterministicActor(obs_dim, self.act_dim, cfg.hidden_sizes)
        return DeterministicActor(encoder[1], self.act_dim, cfg.hidden_sizes, encoder[0])

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect") -> PolicyOutput:
        n = len(obs)
        if mode == "collect" and self.random_actions:
            action = self.rng.uniform(-1, 1, (n, self.act_dim)).astype(np.float32)
        else:
            action = self.actor(to_tensor(obs, self.device).reshape(n, *self.obs_view)).cpu().numpy()
            if mode == "collect" and self.noise > 0:
                noise = self.rng.normal(0.0, self.noise, action.shape)
                action = np.clip(action + noise, -1.0, 1.0).astype(np.float32)
        action = action.reshape(n, *self.action_shape)
        return PolicyOutput(action=action, env_action=self.low + (action + 1) * self.scale)

    def export_graph(self) -> PolicyGraph:
        """``predict`` as one module for ``relayrl export``: the actor's action scaled to the bounds."""
        graph = BoundedActionGraph(ObservationInput(self.obs_rms, self.obs_view), self.actor, self.action_shape,
                                   self.low, self.scale)
        return PolicyGraph(graph, "tanh action scaled to the action bounds")


# ---------------------------------------------------------------- algorithm


class TD3(Algorithm):
    def __init__(self, cfg: TD3Config, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = TD3Policy(obs_space, act_space, cfg)
        if not self.policy.encoded:
            self.critic: TwinQ = TwinQ(int(np.prod(obs_space.shape)) + self.policy.act_dim, cfg.hidden_sizes)
        else:  # one encoder for both critics
            self.critic = EncodedTwinQ(*make_encoder(cfg.encoder, obs_space, act_space, "td3.encoder"),
                                       self.policy.act_dim, cfg.hidden_sizes)
        self.target = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_actor = copy.deepcopy(self.policy.actor).requires_grad_(False)
        # one fused Adam, a group each for the actor and the critics: on the updates between two actor updates
        # the actor's gradients stay None and Adam skips its parameters (their moments and step count wait)
        self.optim = torch.optim.Adam([{"params": list(self.policy.actor.parameters()), "lr": cfg.actor_lr},
                                       {"params": list(self.critic.parameters()), "lr": cfg.critic_lr}], fused=True)
        self.updates = 0
        self.actor_loss = 0.0

    devices = ("cpu", "cuda")

    def to(self, device: torch.device) -> None:
        self.device = self.policy.device = device
        for net in (self.policy.actor, self.critic, self.target, self.target_actor):
            net.to(device)  # (parameters move in place: the optimiser keeps them)

    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, actor, device = self.cfg, self.policy.actor, self.device
        obs, next_obs, action = replay_tensors(batch, self.policy, device)
        self.updates += 1
        update_actor = self.updates % cfg.policy_delay == 0  # (SB3's count: updates 2, 4, ... with delay 2)
        # ---- critics: y = r + γ^m (1 - terminated) min Q_target(s', clip(π_target(s') + clip(ε, -c, c), -1, 1))
        with torch.no_grad():
            noise = (torch.randn_like(action) * cfg.target_policy_noise).clamp(-cfg.noise_clip, cfg.noise_clip)
            next_action = (self.target_actor(next_obs) + noise).clamp(-1.0, 1.0)
            y = bootstrap_target(batch, self.target(next_obs, next_action).min(0).values, device)
        q = self.critic(obs, action)
        weight = sample_weights(batch, device)
        loss = critic_loss = (weight * (q - y).pow(2)).sum(0).mean()
        if update_actor:  # ---- actor: maximise Q_1(s, π(s)), the critics frozen in this term (one backward pass)
            actor_loss = -self.critic(obs, actor(obs), frozen=True)[0].mean()
            loss = loss + actor_loss
        if not torch.isfinite(loss):
            raise NonFiniteError(f"TD3 loss became {loss.item()} (critic {critic_loss.item()}): lower the learning "
                                 "rates or check the rewards")
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        if update_actor:  # ---- the targets follow, as delayed as the actor
            self.actor_loss = actor_loss.item()
            with torch.no_grad():
                torch._foreach_lerp_([*self.target.parameters(), *self.target_actor.parameters()],
                                     [*self.critic.parameters(), *actor.parameters()], cfg.tau)
        self.policy.version += 1  # (every update, as SAC's: versions count updates for max_staleness and the lag)
        self.report_priorities((q - y).detach().abs().mean(0).cpu().numpy())  # |TD error| (twin critics: mean)
        return {"loss/critic": critic_loss.item(), "loss/actor": self.actor_loss, "q_mean": q.mean().item(),
                "updates": 1.0}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training, on the CPU wherever the learner is."""
        return cpu_tree({**self.policy.get_weights(), "critic": self.critic.state_dict(),
                         "target": self.target.state_dict(), "target_actor": self.target_actor.state_dict(),
                         "optim": self.optim.state_dict(), "updates": self.updates, "actor_loss": self.actor_loss,
                         "version": self.policy.version, "rng": self.policy.rng.bit_generator.state})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.critic.load_state_dict(state["critic"])
        self.target.load_state_dict(state["target"])
        self.target_actor.load_state_dict(state["target_actor"])
        self.optim.load_state_dict(state["optim"])
        self.updates = int(state["updates"])
        self.actor_loss = float(state["actor_loss"])
        self.policy.rng.bit_generator.state = state["rng"]


register("td3", TD3Config, TD3, TD3Policy, on_policy=False, defaults={"env": {"id": "Pendulum-v1", "num_envs": 1}})
