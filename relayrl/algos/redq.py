"""REDQ (Chen et al. 2021, "Randomized Ensembled Double Q-Learning: Learning Fast Without a Model"): SAC's
squashed Gaussian actor and entropy tuning with an ensemble of N critics, a target that takes the min over a random
subset of M of them, and a high update-to-data ratio; continuous actions.

Reads top to bottom: config (SAC's options plus the ensemble's), the policy (SAC's), the algorithm (the ensemble
is SAC's TwinQ with N critics: one stacked network, one batched matmul per layer), registration.
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field

from relayrl.algos.registry import register
from relayrl.algos.sac import (EncodedTwinQ, SACConfig, SACPolicy, TwinQ, bootstrap_target, replay_tensors,
                               sample_weights)
from relayrl.core import Algorithm
from relayrl.errors import ConfigError, NonFiniteError
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.device import cpu_tree
from relayrl.policy.encoders import make_encoder
from relayrl.types import Batch


class REDQConfig(SACConfig):
    """SAC's options (its defaults) and the ensemble's: N=10 and M=2 are the paper's (and TMRL's REDQ-SAC's); the
    paper's update-to-data ratio G=20 is lowered to 5, which learned Pendulum-v1 fastest in time on one seed, in
    as few env steps (seed 0, eval every 1,000 steps: -200 at 2,000 env steps for G=5, 10 and 20, at 3,000 for G=3,
    4,000 for G=2; CPU time 25, 40, 86, 30, 33 s). The actor and the temperature learn once per env step, as
    in the paper (``policy_delay`` = G)."""

    num_critics: int = Field(10, ge=2)
    """N: critics in the ensemble (one stacked network)."""
    num_min: int = Field(2, ge=1)
    """M: critics drawn at random for each update's target, which takes their minimum (at most num_critics)."""
    updates_per_step: float = Field(5.0, gt=0)
    """Updates per env step (the update-to-data ratio G; REDQ's sample efficiency comes from a high one: the paper
    uses 20)."""
    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; the actor gets one, the
    ensemble's critics share another (their heads stay num_critics), the target is a copy; hidden_sizes sizes the
    heads (docs/library.md, "Your own network"). null: the built-in choice from the observation space."""
    policy_delay: int = Field(5, ge=1)
    """Update the actor and the temperature once every this many critic updates (= updates_per_step: once per env
    step, as the paper)."""

    def check(self, name: str) -> None:
        super().check(name)
        # (SAC's options, which REDQ's own update does not take yet)
        for option, value in (("compile", self.compile), ("amp", self.amp)):
            if value != "off":
                raise ConfigError(f"{name}.{option}={value}: REDQ's update is not compiled nor run in bf16 (sac, dqn, "
                                  f"ppo and appo are): set {name}.{option}=off")
        if self.num_min > self.num_critics:
            raise ConfigError(f"{name}.num_min={self.num_min} draws more critics than {name}.num_critics="
                              f"{self.num_critics} holds: set {name}.num_min to at most {self.num_critics}")


class REDQPolicy(SACPolicy):
    """SAC's policy (a tanh-squashed Gaussian), named REDQ in its messages and options."""

    label: ClassVar[str] = "REDQ"
    section: ClassVar[str] = "redq"


class REDQ(Algorithm):
    def __init__(self, cfg: REDQConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = REDQPolicy(obs_space, act_space, cfg)
        act_dim = self.policy.act_dim
        if not self.policy.encoded:
            self.critic: TwinQ = TwinQ(int(np.prod(obs_space.shape)) + act_dim, cfg.hidden_sizes, cfg.num_critics)
        else:  # one encoder for the ensemble, N heads
            self.critic = EncodedTwinQ(*make_encoder(cfg.encoder, obs_space, act_space, "redq.encoder"), act_dim,
                                       cfg.hidden_sizes, cfg.num_critics)
        self.target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), requires_grad=cfg.autotune)
        self.target_entropy = -float(act_dim) if cfg.target_entropy is None else cfg.target_entropy
        # one fused Adam, a group each for the actor, the critics and the temperature; between two actor updates
        # the actor's and the temperature's gradients stay None and Adam skips them
        groups = [{"params": list(self.policy.actor.parameters()), "lr": cfg.actor_lr},
                  {"params": list(self.critic.parameters()), "lr": cfg.critic_lr}]
        if cfg.autotune:
            groups.append({"params": [self.log_alpha], "lr": cfg.alpha_lr})
        self.optim = torch.optim.Adam(groups, fused=True)
        self.updates = 0
        self.last = {"loss/actor": 0.0, "entropy": 0.0}  # the latest actor update's metrics

    devices = ("cpu", "cuda")

    def to(self, device: torch.device) -> None:
        self.device = self.policy.device = device
        for net in (self.policy.actor, self.critic, self.target):
            net.to(device)
        self.log_alpha.data = self.log_alpha.data.to(device)

    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, actor = self.cfg, self.policy.actor
        n, device = len(batch["obs"]), self.device
        obs, next_obs, action = replay_tensors(batch, self.policy, device)
        alpha = self.log_alpha.exp().detach()
        self.updates += 1
        update_actor = self.updates % cfg.policy_delay == 0
        # one actor pass over [s'; s] when the actor learns too, over s' alone otherwise
        sampled, sampled_logp = actor.sample(torch.cat([next_obs, obs]) if update_actor else next_obs)
        # ---- critics: y = r + γ^m (1 - terminated) (min over M random target critics Q_i(s', a') - α log π(a'|s'))
        with torch.no_grad():
            subset = torch.randperm(cfg.num_critics, device=device)[:cfg.num_min]
            next_q = self.target(next_obs, sampled[:n])[subset].min(0).values - alpha * sampled_logp[:n]
            y = bootstrap_target(batch, next_q, device)
        q = self.critic(obs, action)
        weight = sample_weights(batch, device)
        loss = critic_loss = 0.5 * (weight * (q - y).pow(2)).sum(0).mean()
        if update_actor:
            # ---- actor: maximise the ensemble's mean Q(s, π(s)) - α log π(π(s)|s), the critics frozen in this term
            new_action, logp = sampled[n:], sampled_logp[n:]
            actor_loss = (alpha * logp - self.critic(obs, new_action, frozen=True).mean(0)).mean()
            loss = loss + actor_loss
            if cfg.autotune:  # ---- temperature toward the entropy target (its gradient reaches log_alpha only)
                loss = loss - (self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        if not torch.isfinite(loss):
            raise NonFiniteError(f"REDQ loss became {loss.item()} (critic {critic_loss.item()}): lower the learning "
                                 "rates or check the rewards")
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target.parameters()), list(self.critic.parameters()), cfg.tau)
        if update_actor:
            self.last = {"loss/actor": actor_loss.item(), "entropy": -logp.mean().item()}
        self.policy.version += 1
        self.report_priorities((q - y).detach().abs().mean(0).cpu().numpy())  # |TD error| (ensemble: mean)
        return {"loss/critic": critic_loss.item(), **self.last, "alpha": alpha.item(), "q_mean": q.mean().item(),
                "updates": 1.0}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training, on the CPU wherever the learner is."""
        return cpu_tree({**self.policy.get_weights(), "critic": self.critic.state_dict(),
                         "target": self.target.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                         "optim": self.optim.state_dict(), "updates": self.updates, "last": dict(self.last),
                         "version": self.policy.version, "rng": self.policy.rng.bit_generator.state})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.critic.load_state_dict(state["critic"])
        self.target.load_state_dict(state["target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.optim.load_state_dict(state["optim"])
        self.updates = int(state["updates"])
        self.last = {k: float(v) for k, v in state["last"].items()}
        self.policy.rng.bit_generator.state = state["rng"]


register("redq", REDQConfig, REDQ, REDQPolicy, on_policy=False, defaults={"env": {"id": "Pendulum-v1", "num_envs": 1}})
