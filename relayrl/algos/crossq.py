"""CrossQ (Bhatt et al., ICLR 2024): SAC without target networks, with batch renormalisation in the critics
and the actor, and one critic pass over the joint batch [(s, a); (s', a')].

Normalising the current and the next state-actions together gives both the same batch statistics, which is
what lets the critic bootstrap from itself with no target network; the actor's next actions are sampled with
its running statistics (eval mode), the actor's own update normalises with batch statistics. Everything else
is SAC's: the tanh-Gaussian actor, the twin critics stacked as one network, automatic entropy tuning, and the
policy (``CrossQPolicy`` is ``SACPolicy`` with a normalised actor). The running statistics are buffers of the
modules: they travel in the policy's weights and in checkpoints, and act, ``predict`` and the exported graph
all normalise with them.

Reads top to bottom: config, networks (batch renormalisation, the critics, the actor), policy, the
algorithm, registration.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from relayrl.algos.registry import register
from relayrl.algos.sac import (LOG_STD_MAX, LOG_STD_MIN, Actor, SACPolicy, TwinQ, bootstrap_target, replay_tensors,
                               sample_weights)
from relayrl.core import Algorithm
from relayrl.errors import NonFiniteError
from relayrl.options import ReplayLoopConfig
from relayrl.policy.device import cpu_tree
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.encoders import make_encoder
from relayrl.types import Batch


class CrossQConfig(ReplayLoopConfig):
    """Defaults: the paper's (Bhatt et al. 2024, and SBX's CrossQ) for the learning rates (1e-3), Adam's
    beta1 (0.5), the policy delay (3) and batch renormalisation (momentum 0.99, plain batch normalisation
    for the first 100k updates of each layer). The networks are 64x64, not the paper's 256x256 actor and
    2048x2048 critics, and learning starts at 500 transitions (SBX: 100): on Pendulum-v1 (seed 0, 2 busy
    CPU cores) critics of 64, 256 and 512 all reached -200 at 4,000 env steps, in 52, 126 and 320 s, so width
    costs wall time and buys no steps there; with 64x64 everywhere and 500 start transitions, seeds 0-2 took
    3,000-4,000 steps. MuJoCo tasks want wider networks: benchmarks/crossq_halfcheetah.py sets 256x256."""

    aliases: ClassVar[dict[str, str]] = {
        "learning_rate": "actor_lr,critic_lr", "qf_learning_rate": "critic_lr", "learning_starts": "start_training",
        "ent_coef": "init_alpha", "net_arch": "hidden_sizes,critic_hidden_sizes", "train_freq": "steps_per_iteration",
        "gradient_steps": "updates_per_step", "batch_norm_momentum": "bn_momentum",
        "features_extractor_class": "encoder"}

    start_training: int = Field(500, ge=0)
    """Transitions in the buffer before the first update (random actions until then)."""
    actor_lr: float = Field(1e-3, gt=0)
    """Actor learning rate (Adam)."""
    critic_lr: float = Field(1e-3, gt=0)
    """Critic learning rate (Adam)."""
    alpha_lr: float = Field(1e-3, gt=0)
    """Entropy temperature learning rate (Adam)."""
    adam_beta1: float = Field(0.5, ge=0, lt=1)
    """Adam's first-moment decay for the actor and the critics (the paper's 0.5; the temperature keeps 0.9)."""
    policy_delay: int = Field(3, ge=1)
    """Critic updates per actor and temperature update."""
    init_alpha: float = Field(1.0, gt=0)
    """Initial entropy temperature."""
    autotune: bool = True
    """Tune the temperature toward target_entropy (off: alpha stays init_alpha)."""
    target_entropy: float | None = None
    """Entropy target (null: -action dimensions)."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64], min_length=1)
    """Hidden layer sizes of the actor (each followed by ReLU and batch renormalisation; the paper's: 256x256)."""
    critic_hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64], min_length=1)
    """Hidden layer sizes of each critic (the paper's 2048x2048 learns MuJoCo tasks in fewer steps, at ~1000x
    the compute per update of 64x64: for a GPU)."""
    bn_momentum: float = Field(0.99, ge=0, lt=1)
    """Running statistics' decay per update: running = momentum * running + (1 - momentum) * batch."""
    bn_warmup: int = Field(100_000, ge=0)
    """Updates of a layer with plain batch normalisation before batch renormalisation corrects toward the
    running statistics (r clipped to [1/3, 3], d to [-5, 5])."""

    def timing_sizes(self) -> tuple[list[int], int]:
        return list(self.critic_hidden_sizes), 2 * self.batch_size  # (the critics' joint batch)

    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; the actor gets one, the
    twin critics share another (their heads stay two); batch renormalisation starts on its features (docs/library.md,
    "Your own network"). null: the built-in choice from the observation space (docs/library.md, "Built-in
    encoders"): a CNN for images, one-hot for Discrete and MultiDiscrete, MLPs on flat observations."""

# ---------------------------------------------------------------- networks

R_MAX, D_MAX, EPS = 3.0, 5.0, 1e-3  # batch renormalisation's clips (SBX's) and the variance epsilon


class BatchNormalise(torch.autograd.Function):
    """``(x - mean) / sqrt(var + EPS)`` over the second-to-last axis, with the batch statistics; returns the
    normalised x and (without gradient) the mean, the biased variance and 1 / std. The backward pass is the
    closed form, ``inv_std * (g - mean(g) - x_hat * mean(g * x_hat))``: on CPU a third of autograd's cost through
    the same ops, and two passes rather than ``torch.var_mean``, which is ~15x slower over a non-last axis (it
    was a fifth of an update's time)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mean = x.mean(-2, keepdim=True)
        centred = x - mean
        var = centred.square().mean(-2, keepdim=True)
        inv_std = torch.rsqrt(var + EPS)
        normed = centred * inv_std
        ctx.save_for_backward(normed, inv_std)
        ctx.mark_non_differentiable(mean, var, inv_std)
        return normed, mean, var, inv_std

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> torch.Tensor:
        normed, inv_std = ctx.saved_tensors
        return inv_std * (grad - grad.mean(-2, keepdim=True) - normed * (grad * normed).mean(-2, keepdim=True))


class BatchRenorm(nn.Module):
    """Batch renormalisation (Ioffe 2017) over the second-to-last axis of [..., n, features] inputs.

    Training (``train``; None: the module's mode): normalise with the batch's mean and (biased) variance, then
    update the running statistics; after ``warmup`` training steps the output is corrected toward the running
    statistics, ``(x - mean) / std * r + d``, with r = std / running std and d = (mean - running mean) /
    running std, clipped and without gradient. Otherwise: normalise with the running statistics. ``lead``: the
    shape of separate statistics ahead of the batch axis ((2,) for the stacked twin critics).
    """

    def __init__(self, features: int, lead: tuple[int, ...] = (), momentum: float = 0.99, warmup: int = 100_000):
        super().__init__()
        shape = (*lead, 1, features)
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.momentum, self.warmup = momentum, warmup
        self.counted = 0  # ``steps`` as a Python int (no device sync per update); written to the buffer on save

    def forward(self, x: torch.Tensor, train: bool | None = None, frozen: bool = False) -> torch.Tensor:
        """``frozen``: the scale and shift get no gradient (gradients reach the input only)."""
        weight, bias = (self.weight.detach(), self.bias.detach()) if frozen else (self.weight, self.bias)
        if not (self.training if train is None else train):
            return torch.addcmul(bias, x - self.running_mean, weight * torch.rsqrt(self.running_var + EPS))
        x, mean, var, inv_std = BatchNormalise.apply(x)
        if self.counted >= self.warmup:
            with torch.no_grad():
                running_inv_std = torch.rsqrt(self.running_var + EPS)
                r = (running_inv_std / inv_std).clamp(1 / R_MAX, R_MAX)
                d = ((mean - self.running_mean) * running_inv_std).clamp(-D_MAX, D_MAX)
            x = torch.addcmul(d, x, r)
        with torch.no_grad():
            self.running_mean.lerp_(mean, 1 - self.momentum)
            self.running_var.lerp_(var, 1 - self.momentum)
        self.counted += 1
        return torch.addcmul(bias, x, weight)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        self.steps.fill_(self.counted)
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args)
        self.counted = int(self.steps)


class RenormTwinQ(TwinQ):
    """SAC's stacked twin critics with batch renormalisation before every linear layer (the input's included):
    normalise, linear, ReLU, ..., linear; each critic keeps its own statistics."""

    def __init__(self, in_dim: int, hidden: list[int], momentum: float, warmup: int):
        super().__init__(in_dim, hidden)
        self.norms = nn.ModuleList(BatchRenorm(size, (2,), momentum, warmup) for size in [in_dim, *hidden])

    def forward(self, obs: torch.Tensor, action: torch.Tensor, frozen: bool = False,  # type: ignore[override]
                train: bool = False) -> torch.Tensor:
        """Q values of both critics, [2, batch]. ``train``: batch statistics (and update the running ones);
        ``frozen``: gradients reach the inputs only."""
        h = torch.cat([obs, action], -1).expand(2, -1, -1)
        last = len(self.weights) - 1
        for i, (norm, w, b) in enumerate(zip(self.norms, self.weights, self.biases)):
            h = norm(h, train, frozen)
            if frozen:
                w, b = w.detach(), b.detach()
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = F.relu(h)
        return h.squeeze(-1)


class EncodedRenormTwinQ(RenormTwinQ):
    """Both critics' heads on the features of one encoder of your own (``encoder``), as SAC's EncodedTwinQ."""

    def __init__(self, encoder: nn.Module, features: int, act_dim: int, hidden: list[int], momentum: float,
                 warmup: int):
        super().__init__(features + act_dim, hidden, momentum, warmup)
        self.encoder = encoder

    def forward(self, obs: torch.Tensor, action: torch.Tensor, frozen: bool = False,  # type: ignore[override]
                train: bool = False) -> torch.Tensor:
        if frozen:  # gradients reach the action only
            with torch.no_grad():
                features = self.encoder(obs)
        else:
            features = self.encoder(obs)
        return super().forward(features, action, frozen, train)


class RenormActor(Actor):
    """SAC's tanh-Gaussian actor with batch renormalisation on its input and after every hidden ReLU. It stays
    in eval mode (running statistics: acting, ``predict``, export); ``CrossQ.learn`` switches it to training
    mode for the actor's own update only."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], momentum: float, warmup: int):
        nn.Module.__init__(self)
        layers: list[nn.Module] = [BatchRenorm(obs_dim, (), momentum, warmup)]
        for a, b in zip([obs_dim, *hidden[:-1]], hidden):
            layers += [nn.Linear(a, b), nn.ReLU(), BatchRenorm(b, (), momentum, warmup)]
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Linear(hidden[-1], 2 * act_dim)
        self.eval()

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.head(self.trunk(obs)).chunk(2, -1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)


class EncodedRenormActor(RenormActor):
    """The actor on the features of its own encoder (``encoder``)."""

    def __init__(self, encoder: nn.Module, features: int, act_dim: int, hidden: list[int], momentum: float,
                 warmup: int):
        super().__init__(features, act_dim, hidden, momentum, warmup)
        self.encoder = encoder
        self.eval()

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(self.encoder(obs))


# ---------------------------------------------------------------- policy


class CrossQPolicy(SACPolicy):
    """SAC's policy (samples in "collect" mode, tanh(mean) in "eval", uniform random actions until
    ``start_training``, export graph) with the batch-renormalised actor, which acts with its running statistics."""

    label, section = "CrossQ", "crossq"

    def make_actor(self, obs_dim: int, encoder: tuple[nn.Module, int] | None,  # type: ignore[override]
                   cfg: CrossQConfig) -> Actor:
        if encoder is None:
            return RenormActor(obs_dim, self.act_dim, cfg.hidden_sizes, cfg.bn_momentum, cfg.bn_warmup)
        return EncodedRenormActor(*encoder, self.act_dim, cfg.hidden_sizes, cfg.bn_momentum, cfg.bn_warmup)


# ---------------------------------------------------------------- algorithm


class CrossQ(Algorithm):
    def __init__(self, cfg: CrossQConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = CrossQPolicy(obs_space, act_space, cfg)
        norm = (cfg.bn_momentum, cfg.bn_warmup)
        if not self.policy.encoded:
            in_dim = int(np.prod(obs_space.shape)) + self.policy.act_dim
            self.critic: RenormTwinQ = RenormTwinQ(in_dim, cfg.critic_hidden_sizes, *norm)
        else:  # one encoder for both critics
            self.critic = EncodedRenormTwinQ(*make_encoder(cfg.encoder, obs_space, act_space, "crossq.encoder"),
                                             self.policy.act_dim, cfg.critic_hidden_sizes, *norm)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), requires_grad=cfg.autotune)
        self.target_entropy = -float(self.policy.act_dim) if cfg.target_entropy is None else cfg.target_entropy
        # one fused Adam, a parameter group each (as SAC's); on the updates without an actor step the actor and
        # the temperature have no gradient, and Adam leaves them (and their moments) as they are
        betas = (cfg.adam_beta1, 0.999)
        groups = [{"params": list(self.policy.actor.parameters()), "lr": cfg.actor_lr, "betas": betas},
                  {"params": list(self.critic.parameters()), "lr": cfg.critic_lr, "betas": betas}]
        if cfg.autotune:
            groups.append({"params": [self.log_alpha], "lr": cfg.alpha_lr, "betas": (0.9, 0.999)})
        self.optim = torch.optim.Adam(groups, fused=True)
        self.updates = 0
        self.actor_metrics = {"loss/actor": 0.0, "entropy": 0.0}

    devices = ("cpu", "cuda")

    def to(self, device: torch.device) -> None:
        self.device = self.policy.device = device
        for net in (self.policy.actor, self.critic):
            net.to(device)  # (parameters move in place: the optimiser keeps them)
        self.log_alpha.data = self.log_alpha.data.to(device)

    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, actor = self.cfg, self.policy.actor
        n, device = len(batch["obs"]), self.device
        obs, next_obs, action = replay_tensors(batch, self.policy, device)
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():  # the next actions: the actor with its running statistics (as it acts)
            next_action, next_logp = actor.sample(next_obs)
        # ---- critics: one pass over [(s, a); (s', a')] with batch statistics; y from the same pass, no target
        q_both = self.critic(torch.cat([obs, next_obs]), torch.cat([action, next_action]), train=True)
        q = q_both[:, :n]
        with torch.no_grad():
            y = bootstrap_target(batch, q_both[:, n:].min(0).values - alpha * next_logp, device)
        weight = sample_weights(batch, device)
        critic_loss = 0.5 * (weight * (q - y).pow(2)).sum(0).mean()
        loss, metrics = critic_loss, {"loss/critic": critic_loss.item()}
        if self.updates % cfg.policy_delay == 0:
            # ---- actor (batch statistics, its own update) against the frozen critics (running statistics)
            actor.train()
            try:
                new_action, logp = actor.sample(obs)
            finally:
                actor.eval()
            q_pi = self.critic(obs, new_action, frozen=True).min(0).values
            actor_loss = (alpha * logp - q_pi).mean()
            loss = loss + actor_loss
            if cfg.autotune:  # ---- temperature toward the entropy target
                loss = loss - (self.log_alpha * (logp.detach() + self.target_entropy)).mean()
            self.actor_metrics = {"loss/actor": actor_loss.item(), "entropy": -logp.mean().item()}
        metrics.update(self.actor_metrics)  # (the last actor update's, so that a round's means count every update)
        if not torch.isfinite(loss):
            raise NonFiniteError(f"CrossQ loss became {loss.item()} ({metrics}): lower the learning rates or check "
                                 "the rewards")
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        self.updates += 1
        self.policy.version += 1
        self.report_priorities((q - y).detach().abs().mean(0).cpu().numpy())  # |TD error| (twin critics: mean)
        return {**metrics, "alpha": alpha.item(), "q_mean": q.mean().item(), "updates": 1.0}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training (the running statistics are buffers of actor and critic)."""
        return cpu_tree({**self.policy.get_weights(), "critic": self.critic.state_dict(),
                         "log_alpha": self.log_alpha.detach().clone(), "optim": self.optim.state_dict(),
                         "updates": self.updates, "version": self.policy.version,
                         "rng": self.policy.rng.bit_generator.state})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.critic.load_state_dict(state["critic"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.optim.load_state_dict(state["optim"])
        self.updates = int(state["updates"])
        self.policy.rng.bit_generator.state = state["rng"]


register("crossq", CrossQConfig, CrossQ, CrossQPolicy, on_policy=False,
         defaults={"env": {"id": "Pendulum-v1", "num_envs": 1}})
