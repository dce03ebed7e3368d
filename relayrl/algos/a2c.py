"""Advantage Actor-Critic (A2C, Mnih et al. 2016, synchronous): one gradient step per short rollout.

Reads top to bottom: config, the algorithm (n-step advantages, one RMSprop step on the whole rollout),
registration. The policy is PPO's (``PPOPolicy``: policy/actor_critic.py's networks, action masks, encoders,
recurrent layers, export), and so is the rollout (a RolloutStore's, data/rollout.py), so A2C runs wherever PPO
does: inline, on worker pools (mp, Ray) and through the relay.

The defaults are Stable-Baselines3's A2C (``n_steps`` 5, RMSprop with alpha 0.99 and eps 1e-5, ``gae_lambda`` 1,
``vf_coef`` 0.5, ``max_grad_norm`` 0.5, lr 7e-4, separate 64x64 tanh actor and critic) with RL Zoo's CartPole-v1
settings (8 envs, ``ent_coef`` 0). As in SB3, the value loss is the plain mean squared error times ``vf_coef``
and one optimiser steps every parameter (actor, critic and a shared encoder).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from relayrl.algos.ppo import PPOPolicy
from relayrl.algos.registry import register
from relayrl.core import Algorithm
from relayrl.data.dtypes import to_tensor
from relayrl.data.gae import compute_gae
from relayrl.data.minibatches import sequence_minibatches
from relayrl.errors import ConfigError, NonFiniteError
from relayrl.options import AlgoConfig
from relayrl.policy.device import cpu_tree
from relayrl.policy.encoder import EncoderRef
from relayrl.types import Batch


class A2CConfig(AlgoConfig):
    aliases: ClassVar[dict[str, str]] = {
        "learning_rate": "lr", "n_steps": "num_steps", "ent_coef": "entropy_coef", "max_grad_norm": "grad_clip",
        "discount": "gamma", "lam": "gae_lambda", "normalize_advantages": "normalize_advantage", "alpha": "rms_alpha",
        "eps": "rms_eps", "norm_obs": "obs_norm", "net_arch": "hidden_sizes", "features_extractor_class": "encoder"}

    num_steps: int = Field(5, ge=1)
    """Vector steps collected per update (the rollout holds num_steps x env.num_envs steps; SB3's n_steps 5)."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    gae_lambda: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda (1: plain n-step returns over the rollout, as SB3's A2C)."""
    lr: float = Field(7e-4, gt=0.0)
    """RMSprop learning rate (SB3's 7e-4)."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over total_steps (RL Zoo's lin_7e-4 on some envs)."""
    rms_alpha: float = Field(0.99, gt=0.0, lt=1.0)
    """RMSprop smoothing constant (SB3's 0.99)."""
    rms_eps: float = Field(1e-5, gt=0.0)
    """RMSprop epsilon (SB3's 1e-5)."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Entropy bonus coefficient (RL Zoo's CartPole setting, 0)."""
    vf_coef: float = Field(0.5, ge=0.0)
    """Weight of the value loss (mean squared error) in the one loss."""
    grad_clip: float | None = Field(0.5, gt=0.0)
    """Maximum norm of the gradient of all parameters together (null: no clipping)."""
    normalize_advantage: bool = False
    """Normalise the rollout's advantages (SB3's default: off)."""
    obs_norm: bool = False
    """Normalise observations with a running mean and std."""
    update_norm: bool | None = None
    """Update the observation statistics from collected data (null: yes, with obs_norm; false freezes them, e.g.
    after --previous). Needs obs_norm."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor and of the critic (with an encoder: of their heads on its features)."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "tanh"
    """Hidden activation."""
    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; hidden_sizes MLP heads go
    on top (docs/library.md, "Your own network"). null: the built-in choice from the observation space
    (docs/library.md, "Built-in encoders"): a CNN for images, one-hot for Discrete and MultiDiscrete, MLPs on flat
    observations."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""
    recurrent: Literal["lstm", "gru"] | None = None
    """Recurrent actor and critic (lstm or gru; null: feed-forward MLPs); each update runs the network over the
    rollout's whole trajectories, from the state stored at each one's first step."""
    recurrent_hidden: int = Field(64, ge=1)
    """Units of each recurrent layer."""
    shared_trunk: bool | None = None
    """One trunk (an encoder, a recurrent layer) feeds both the actor and the critic head; false: the critic has its
    own. null: shared when the observations go through an encoder, separate MLPs on flat vectors."""
    critic_only_keys: list[str] = Field(default_factory=list)
    """Keys of a Dict observation only the critic sees (privileged inputs, as ppo.critic_only_keys). []: none."""

    def check(self, name: str = "a2c") -> None:
        if self.update_norm is not None and not self.obs_norm:
            raise ConfigError(f"{name}.update_norm={str(self.update_norm).lower()} has no effect with "
                              f"{name}.obs_norm=false (there are no statistics to update): set {name}.obs_norm=true, "
                              f"or leave {name}.update_norm at null")

    def timing_sizes(self) -> tuple[list[int], int]:
        return list(self.hidden_sizes), 8 * self.num_steps


# ---------------------------------------------------------------- algorithm


class A2C(Algorithm):
    """Learns from [T, N] rollouts: ``learn(rollout, progress)`` takes one gradient step and returns metrics."""

    devices = ("cpu", "cuda")

    def __init__(self, cfg: A2CConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = PPOPolicy(obs_space, act_space, cfg)  # (reads the network options PPOConfig has too)
        self.optim = self.optimizer()

    def optimizer(self) -> torch.optim.RMSprop:
        """One RMSprop over every parameter, as SB3's A2C (torch's RMSprop: eps outside the square root)."""
        return torch.optim.RMSprop(self.policy.model.parameters(), lr=self.cfg.lr, alpha=self.cfg.rms_alpha,
                                   eps=self.cfg.rms_eps)

    def to(self, device: torch.device) -> None:
        self.device = device
        self.policy.to(device)
        self.optim = self.optimizer()  # (before any update: on the parameters as moved)

    def learn(self, rollout: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        T, N = rollout["value"].shape
        # ---- advantages: GAE(gamma, lambda) per trajectory; truncated episodes bootstrap from V(final obs)
        adv, ret = compute_gae(rollout["reward"], rollout["value"], rollout["next_value"], rollout["terminated"],
                               rollout["truncated"], cfg.gamma, cfg.gae_lambda)
        steps = {"obs": to_tensor(rollout["obs"], self.device).reshape(T, N, *policy.obs_view),
                 "action": self.tensor(rollout["action"]), "advantage": self.tensor(adv), "return": self.tensor(ret)}
        if "action_mask" in rollout:
            steps["action_mask"] = self.tensor(rollout["action_mask"])
        mb = self.whole_rollout(steps, rollout)
        lr = cfg.lr * max(0.0, 1.0 - progress) if cfg.anneal_lr else cfg.lr
        for group in self.optim.param_groups:
            group["lr"] = lr
        # ---- one gradient step: policy gradient, value regression, entropy bonus
        out, value = self.forward(mb)
        logp, entropy = policy.logp_entropy(out, mb["action"], mb.get("action_mask"))
        advantage = mb["advantage"]
        if cfg.normalize_advantage and len(advantage) > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        policy_loss = -(advantage * logp).mean()
        value_loss = F.mse_loss(value, mb["return"])
        entropy_mean = entropy.mean()
        loss = policy_loss - cfg.entropy_coef * entropy_mean + cfg.vf_coef * value_loss
        if not torch.isfinite(loss):
            raise NonFiniteError(f"A2C loss became {loss.item()} (policy {policy_loss.item()}, value "
                                 f"{value_loss.item()}): lower a2c.lr, or enable a2c.obs_norm")
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = (nn.utils.clip_grad_norm_(policy.model.parameters(), cfg.grad_clip)
                     if cfg.grad_clip is not None else torch.zeros(()))
        self.optim.step()
        policy.version += 1
        y, v = ret.reshape(-1), rollout["value"].reshape(-1)
        var_y = float(np.var(y))
        return {"loss/policy": policy_loss.item(), "loss/value": value_loss.item(), "loss/entropy": entropy_mean.item(),
                "grad_norm": grad_norm.item(), "lr": lr, "updates": 1.0,
                "explained_variance": float("nan") if var_y == 0 else 1.0 - float(np.var(y - v)) / var_y}

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` on the learner's device, dtype kept (the CPU: shares its memory)."""
        return torch.from_numpy(array).to(self.device)

    def whole_rollout(self, steps: dict[str, torch.Tensor], rollout: Batch) -> dict[str, torch.Tensor]:
        """The rollout as one batch: its steps flattened, or (recurrent) every trajectory at once, padded."""
        if not self.policy.recurrent:
            return {key: value.reshape(-1, *value.shape[2:]) for key, value in steps.items()}
        done = rollout["terminated"] | rollout["truncated"]
        epoch = sequence_minibatches(steps, self.tensor(rollout["hidden"]), done, 0, done.size)
        return next(iter(epoch()))

    def forward(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's output and the value of every real step of ``mb``."""
        model = self.policy.model
        if self.policy.recurrent:
            out, value, _ = model(mb["obs"], mb["hidden"])
            return out[mb["mask"]], value[mb["mask"]]  # padding is dropped here, before any loss
        return model.actor_critic(mb["obs"])

    # ---- persistence: everything needed to continue training exactly
    def state_dict(self) -> dict[str, Any]:
        return {**self.policy.get_weights(), "version": self.policy.version, "optim": cpu_tree(self.optim.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.optim.load_state_dict(state["optim"])


register("a2c", A2CConfig, A2C, PPOPolicy, on_policy=True)
