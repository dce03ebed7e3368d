"""Soft Actor-Critic: twin critics batched as one network, target smoothing, automatic entropy tuning,
tanh-squashed Gaussian policy, continuous actions.

Reads top to bottom: config, networks (the twin critic is one stacked network: one batched matmul
per layer instead of two MLPs), policy, the algorithm, registration.
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from relayrl.algos.compiled import CompiledLoss
from relayrl.algos.registry import register
from relayrl.core import Algorithm, Policy
from relayrl.data.dtypes import stored_dtype, to_tensor
from relayrl.errors import EnvError, NonFiniteError
from relayrl.learners.collective import Collective, per_learner
from relayrl.options import CompiledUpdateConfig, ReplayLoopConfig
from relayrl.policy.device import cpu_state, cpu_tree, float_to_device
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.encoders import check_space, make_encoder
from relayrl.policy.graph import ObservationInput, PolicyGraph
from relayrl.policy.networks import mlp
from relayrl.policy.privileged import ActorKeys, check_keys, fill_hidden
from relayrl.types import Batch, Mode, PolicyOutput

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class SACConfig(ReplayLoopConfig, CompiledUpdateConfig):
    aliases: ClassVar[dict[str, str]] = {
        "learning_rate": "actor_lr,critic_lr", "learning_starts": "start_training", "ent_coef": "init_alpha",
        "net_arch": "hidden_sizes", "train_freq": "steps_per_iteration", "gradient_steps": "updates_per_step",
        "features_extractor_class": "encoder"}

    start_training: int = Field(1000, ge=0)
    """Transitions in the buffer before the first update (random actions until then)."""
    tau: float = Field(0.005, gt=0, le=1)
    """Target network smoothing per update."""
    actor_lr: float = Field(1e-3, gt=0)
    """Actor learning rate (Adam)."""
    critic_lr: float = Field(1e-3, gt=0)
    """Critic learning rate (Adam)."""
    alpha_lr: float = Field(1e-3, gt=0)
    """Entropy temperature learning rate (Adam)."""
    init_alpha: float = Field(1.0, gt=0)
    """Initial entropy temperature."""
    autotune: bool = True
    """Tune the temperature toward target_entropy (off: alpha stays init_alpha)."""
    target_entropy: float | None = None
    """Entropy target (null: -action dimensions)."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor and of each critic (64x64: per-op overhead, not FLOPs, bounds
    an update of this size on a CPU, and it learns Pendulum as fast as 256x256)."""

    critic_only_keys: list[str] = Field(default_factory=list)
    """Keys of a Dict observation only the critics see (privileged inputs, an asymmetric actor-critic:
    policy/privileged.py); the actor reads the other keys, and predict needs only those. []: none."""

    def timing_sizes(self) -> tuple[list[int], int]:
        return list(self.hidden_sizes), self.batch_size

    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; the actor gets one, the
    twin critics share another (their heads stay two), the target is a copy; hidden_sizes sizes the heads
    (docs/library.md, "Your own network"). null: the built-in choice from the observation space (docs/library.md,
    "Built-in encoders"): a CNN for images, one-hot for Discrete and MultiDiscrete, MLPs on flat observations."""

# ---------------------------------------------------------------- networks


class TwinQ(nn.Module):
    """Two Q networks as one (or ``critics`` of them: REDQ's ensemble): weights stacked on a leading axis,
    evaluated with batched matmuls."""

    def __init__(self, in_dim: int, hidden: list[int], critics: int = 2):
        super().__init__()
        self.critics = critics
        sizes = [in_dim, *hidden, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for a, b in zip(sizes[:-1], sizes[1:]):
            w = torch.empty(critics, a, b)
            for k in range(critics):  # the default Linear init, per critic
                nn.init.kaiming_uniform_(w[k].T, a=math.sqrt(5))
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(torch.empty(critics, 1, b).uniform_(-1 / math.sqrt(a),
                                                                                 1 / math.sqrt(a))))

    def forward(self, obs: torch.Tensor, action: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """Q values of every critic, shape [critics, batch]. ``frozen``: gradients reach the inputs only."""
        h = torch.cat([obs, action], -1).expand(self.critics, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if frozen:
                w, b = w.detach(), b.detach()
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = F.relu(h)
        return h.squeeze(-1)


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]):
        super().__init__()
        self.trunk = mlp(obs_dim, hidden[:-1], hidden[-1], "relu")
        self.head = nn.Linear(hidden[-1], 2 * act_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.head(F.relu(self.trunk(obs))).chunk(2, -1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A tanh-squashed sample in [-1, 1] and its log-probability (with the tanh correction)."""
        return squashed_sample(*self(obs))


def squashed_sample(mean: torch.Tensor, log_std: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``Actor.sample`` from the actor's output (SAC's loss takes it in float32 from a bf16 forward pass)."""
    std = log_std.exp()
    u = mean + std * torch.randn_like(mean)
    logp = (-0.5 * ((u - mean) / std).pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    # log(1 - tanh(u)^2) in its numerically stable form
    logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
    return torch.tanh(u), logp


class EncodedTwinQ(TwinQ):
    """Both critics' heads on the features of one encoder of your own (``encoder``): the twins still differ in
    their heads (as DrQ and SAC-AE share the critics' encoder), and the encoder costs one pass, not two."""

    def __init__(self, encoder: nn.Module, features: int, act_dim: int, hidden: list[int], critics: int = 2):
        super().__init__(features + act_dim, hidden, critics)
        self.encoder = encoder

    def forward(self, obs: torch.Tensor, action: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        if frozen:  # gradients reach the action only
            with torch.no_grad():
                features = self.encoder(obs)
        else:
            features = self.encoder(obs)
        return super().forward(features, action, frozen)


class EncodedActor(Actor):
    """The actor's head on the features of its own encoder (``encoder``)."""

    def __init__(self, encoder: nn.Module, features: int, act_dim: int, hidden: list[int]):
        super().__init__(features, act_dim, hidden)
        self.encoder = encoder

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(self.encoder(obs))


# ---------------------------------------------------------------- policy


class SACPolicy(Policy):
    """Samples in "collect" mode, tanh(mean) in "eval"; actions are learned in [-1, 1] and scaled to
    the env's bounds for ``env_action``. Uniform random actions until ``start_training`` env steps.
    ``label`` and ``section`` name the algorithm in messages (REDQ acts with this policy too; CrossQ's is
    this one with another actor, ``make_actor``)."""

    label: ClassVar[str] = "SAC"  # the algorithm's name in messages
    section: ClassVar[str] = "sac"  # its config section

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: SACConfig):
        check_box_actions(act_space, self.label)
        check_space(obs_space, f"{self.section}.encoder")
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_dtype = stored_dtype(obs_space.dtype)  # (refuses dtypes no network can read)
        self.act_dim = int(np.prod(act_space.shape))
        self.action_shape = tuple(act_space.shape)
        self.action_dtype = np.dtype(np.float32)
        self.low = act_space.low.astype(np.float32)
        self.scale = ((act_space.high - act_space.low) / 2).astype(np.float32)
        # yours (encoder), a built-in one for images and categories, or None (flat observations: the MLPs)
        encoder = make_encoder(cfg.encoder, obs_space, act_space, f"{self.section}.encoder")
        # privileged critic inputs (SAC's and REDQ's option): the actor's encoder reads the other keys only
        self.critic_only_keys = list(cfg.critic_only_keys) if isinstance(cfg, SACConfig) else []
        if self.critic_only_keys:
            check_keys(self.critic_only_keys, obs_space, self.section, encoder=cfg.encoder, shared_trunk=None,
                       recurrent=None)
            actor_keys = ActorKeys(obs_space, self.critic_only_keys, f"{self.section}.encoder")
            encoder = (actor_keys, actor_keys.features)
        self.actor: Actor = self.make_actor(int(np.prod(obs_space.shape)), encoder, cfg)
        self.encoded = encoder is not None
        # what the networks read: flattened observations, or [n, *obs_shape] as an encoder takes them
        self.obs_view: tuple[int, ...] = (-1,) if encoder is None else tuple(obs_space.shape)
        self.start_training = cfg.start_training
        self.random_actions = cfg.start_training > 0  # uniform actions before learning starts
        self.version = 0
        self.rng = np.random.default_rng(int(torch.randint(2**31, ()).item()))

    def make_actor(self, obs_dim: int, encoder: tuple[nn.Module, int] | None, cfg: SACConfig) -> Actor:
        """The actor on flat observations of ``obs_dim`` values, or on ``encoder``'s features (module, width)."""
        if encoder is None:
            return Actor(obs_dim, self.act_dim, cfg.hidden_sizes)
        return EncodedActor(*encoder, self.act_dim, cfg.hidden_sizes)

    def check_observation(self, obs: Any) -> tuple[np.ndarray, bool]:
        """``Policy.check_observation``; a Dict observation may lack the critics' own keys (zeros then fill them:
        the actor never reads them)."""
        if self.critic_only_keys and isinstance(obs, dict):
            obs = fill_hidden(self.observation_space, obs, self.critic_only_keys)
        return super().check_observation(obs)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect") -> PolicyOutput:
        n = len(obs)
        if mode == "collect" and self.random_actions:
            action = self.rng.uniform(-1, 1, (n, self.act_dim)).astype(np.float32)
        else:
            x = to_tensor(obs, self.device).reshape(n, *self.obs_view)
            if mode == "collect":
                action = self.actor.sample(x)[0].cpu().numpy()
            else:
                action = torch.tanh(self.actor(x)[0]).cpu().numpy()
        action = action.reshape(n, *self.action_shape)
        return PolicyOutput(action=action, env_action=self.low + (action + 1) * self.scale)

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        self.random_actions = env_steps < self.start_training

    def export_graph(self) -> PolicyGraph:
        """``predict`` as one module for ``relayrl export``: tanh of the actor's mean, scaled to the bounds."""
        return PolicyGraph(SACGraph(self), "tanh squash scaled to the action bounds",
                           unread=tuple(self.critic_only_keys))

    def get_weights(self) -> dict[str, Any]:
        return {"actor": cpu_state(self.actor)}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.actor.load_state_dict(weights["actor"])
        if version is not None:
            self.version = version


def check_box_actions(act_space: gym.Space, label: str) -> None:
    """Refuse what a squashed continuous policy cannot act in: a non-Box action space, or unbounded actions."""
    if not isinstance(act_space, gym.spaces.Box):
        raise EnvError(f"{label} needs a Box (continuous) action space, got {act_space}: use DQN or PPO")
    if not (np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high))):
        raise EnvError(f"{label} squashes actions into the action bounds, which must be finite: {act_space}")


class BoundedActionGraph(nn.Module):
    """``predict(obs)``: the actor's action in [-1, 1] (``head`` of its output), scaled to the action bounds
    (policy/graph.py). TD3's and IQL's actors give that action; SAC's gives (mean, log std): ``SACGraph``."""

    def __init__(self, observation: ObservationInput, actor: nn.Module, action_shape: tuple[int, ...],
                 low: np.ndarray, scale: np.ndarray):
        super().__init__()
        self.observation, self.actor = observation, actor
        self.shape = tuple(action_shape)
        self.register_buffer("low", torch.tensor(low))
        self.register_buffer("scale", torch.tensor(scale))

    def head(self, out: Any) -> torch.Tensor:
        return out

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        action = self.head(self.actor(self.observation(obs)))
        return self.low + (action.reshape((action.shape[0],) + self.shape) + 1) * self.scale


class SACGraph(BoundedActionGraph):
    """``predict(obs)``: tanh of the actor's mean, scaled from [-1, 1] to the action bounds."""

    def __init__(self, policy: SACPolicy):
        super().__init__(ObservationInput(policy.obs_rms, policy.obs_view), policy.actor, policy.action_shape,
                         policy.low, policy.scale)

    def head(self, out: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.tanh(out[0])


# ---------------------------------------------------------------- what SAC, TD3, REDQ and CrossQ learn from


def replay_tensors(batch: Batch, policy: SACPolicy, device: torch.device
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """obs and next_obs as the networks read them, and the [-1, 1] actions, of a replay batch on ``device``
    (it moves once, as stored; CUDA: from pinned memory, policy/device.py)."""
    n = len(batch["obs"])
    return (float_to_device(batch["obs"], device).reshape(n, *policy.obs_view),
            float_to_device(batch["next_obs"], device).reshape(n, *policy.obs_view),
            float_to_device(batch["action"], device).reshape(n, -1))


def bootstrap_target(batch: Batch, next_q: torch.Tensor, device: torch.device) -> torch.Tensor:
    """y = r + γ^m (1 - terminated) next_q (replay's ``discount`` holds γ^m of each n-step transition)."""
    return bootstrap(*bootstrap_columns(batch, device), next_q)


def bootstrap_columns(batch: Batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """reward, discount and terminated of a replay batch, float32 on ``device``."""
    return tuple(float_to_device(batch[key], device) for key in ("reward", "discount", "terminated"))


def bootstrap(reward: torch.Tensor, discount: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor
              ) -> torch.Tensor:
    """``bootstrap_target`` of the batch's columns."""
    return reward + discount * (1.0 - terminated) * next_q


def sample_weights(batch: Batch, device: torch.device) -> torch.Tensor:
    """Prioritized replay's importance weights, or ones."""
    n = len(batch["obs"])
    return float_to_device(batch["weight"], device) if "weight" in batch else torch.ones(n, device=device)


# ---------------------------------------------------------------- algorithm


class SAC(Algorithm):
    """``learn(batch)`` takes a replay minibatch; as one of N data-parallel learners, its own ``batch_size / N``
    rows (``bind_learners``)."""

    data_parallel = True

    def __init__(self, cfg: SACConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = SACPolicy(obs_space, act_space, cfg)
        if not self.policy.encoded:
            in_dim = int(np.prod(obs_space.shape)) + self.policy.act_dim
            self.critic: TwinQ = TwinQ(in_dim, cfg.hidden_sizes)
            self.target: TwinQ = TwinQ(in_dim, cfg.hidden_sizes)
            self.target.load_state_dict(self.critic.state_dict())
        else:  # one encoder for both critics; the target copies it too
            self.critic = EncodedTwinQ(*make_encoder(cfg.encoder, obs_space, act_space, "sac.encoder"),
                                       self.policy.act_dim, cfg.hidden_sizes)
            self.target = copy.deepcopy(self.critic)
        self.target.requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), requires_grad=cfg.autotune)
        self.target_entropy = -float(self.policy.act_dim) if cfg.target_entropy is None else cfg.target_entropy
        # one fused Adam, a parameter group each for the actor, the critics and the temperature: the three
        # losses touch disjoint parameters, so one backward pass and one step serve all three
        groups = [{"params": list(self.policy.actor.parameters()), "lr": cfg.actor_lr},
                  {"params": list(self.critic.parameters()), "lr": cfg.critic_lr}]
        if cfg.autotune:
            groups.append({"params": [self.log_alpha], "lr": cfg.alpha_lr})
        self.optim = torch.optim.Adam(groups, fused=True)
        self.updates = 0
        self.loss_step = CompiledLoss(self.losses, cfg, "sac")  # compiled, bf16: cfg.compile, cfg.amp

    devices = ("cpu", "cuda")

    def to(self, device: torch.device) -> None:
        self.device = self.policy.device = device
        for net in (self.policy.actor, self.critic, self.target):
            net.to(device)  # (parameters move in place: the optimiser keeps them)
        self.log_alpha.data = self.log_alpha.data.to(device)  # in place too, as Module.to moves parameters
        self.loss_step.to(device)

    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, device = self.cfg, self.device
        loss, q, y, terms = self.loss_step(*replay_tensors(batch, self.policy, device),
                                           *bootstrap_columns(batch, device), sample_weights(batch, device))
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        # every learner's gradients and metrics averaged in one all-reduce (one learner: as they are), then read
        # from the device once: every learner sees the same losses and stops together at a non-finite one
        values = self.learners.average_gradients(self.trained_parameters(), torch.stack(list(terms.values())))
        stats = dict(zip(terms, values.cpu().tolist()))
        if not np.isfinite(stats["loss/critic"] + stats["loss/actor"]):
            raise NonFiniteError(f"SAC loss became {stats['loss/critic'] + stats['loss/actor']} (critic "
                                 f"{stats['loss/critic']}, actor {stats['loss/actor']}): lower the learning rates or "
                                 "check the rewards")
        self.optim.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(self.target.parameters()), list(self.critic.parameters()), cfg.tau)
        self.updates += 1
        self.policy.version += 1
        self.report_priorities((q - y).detach().abs().mean(0).cpu().numpy())  # |TD error| (twin critics: mean)
        return {**stats, "updates": 1.0}

    def trained_parameters(self) -> list[torch.Tensor]:
        """What the optimiser steps: the actor's, the critics' and (autotune) the temperature."""
        return [p for group in self.optim.param_groups for p in group["params"]]

    def bind_learners(self, learners: Collective) -> None:
        """One of ``learners.size`` learners, each learning from ``batch_size / learners`` rows of its own replay."""
        per_learner(self.cfg.batch_size, learners, "sac.batch_size")
        self.loss_step.share(learners.size)
        super().bind_learners(learners)

    def losses(self, obs: torch.Tensor, next_obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
               discount: torch.Tensor, terminated: torch.Tensor, weight: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The critics', the actor's and the temperature's losses summed, Q [2, n], the targets y [n] and the
        metrics; what ``loss_step`` compiles (the networks in bf16 with amp, the losses in float32)."""
        cfg, actor, n = self.cfg, self.policy.actor, len(obs)
        alpha = self.log_alpha.exp().detach()
        # one actor pass over [s; s'] serves the target (s', detached) and the actor loss (s)
        with self.loss_step.autocast():
            mean, log_std = actor(torch.cat([obs, next_obs]))
        sampled, sampled_logp = squashed_sample(mean.float(), log_std.float())
        new_action, logp = sampled[:n], sampled_logp[:n]
        with self.loss_step.autocast():
            with torch.no_grad():
                target_q = self.target(next_obs, sampled[n:]).float()
            q = self.critic(obs, action).float()
            # the critics are frozen in the actor's term, so one backward pass over both losses gives each network
            # exactly its own gradient
            q_pi = self.critic(obs, new_action, frozen=True).float().min(0).values
        # ---- critics: y = r + γ^m (1 - terminated) (min Q_target(s', a') - α log π(a'|s'))
        with torch.no_grad():
            y = bootstrap(reward, discount, terminated, target_q.min(0).values - alpha * sampled_logp[n:])
        critic_loss = 0.5 * (weight * (q - y).pow(2)).sum(0).mean()
        # ---- actor: maximise min Q(s, π(s)) - α log π(π(s)|s)
        actor_loss = (alpha * logp - q_pi).mean()
        loss = critic_loss + actor_loss
        if cfg.autotune:  # ---- temperature toward the entropy target (its gradient reaches log_alpha only)
            loss = loss - (self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        return loss, q, y, {"loss/critic": critic_loss.detach(), "loss/actor": actor_loss.detach(), "alpha": alpha,
                            "entropy": -logp.detach().mean(), "q_mean": q.detach().mean()}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training, on the CPU wherever the learner is."""
        return cpu_tree({**self.policy.get_weights(), "critic": self.critic.state_dict(),
                         "target": self.target.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                         "optim": self.optim.state_dict(), "updates": self.updates,
                         "version": self.policy.version, "rng": self.policy.rng.bit_generator.state})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.critic.load_state_dict(state["critic"])
        self.target.load_state_dict(state["target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if "optim" in state:
            self.optim.load_state_dict(state["optim"])
        else:  # a checkpoint of before 2026-11-25: an optimiser each for the actor, the critics, the temperature
            parts = ["actor_optim", "critic_optim", "alpha_optim"][:len(self.optim.param_groups)]
            self.optim.load_state_dict(merge_optimizer_states([state[k] for k in parts], self.optim))
        self.updates = int(state["updates"])
        self.policy.rng.bit_generator.state = state["rng"]


def merge_optimizer_states(parts: list[dict[str, Any]], optim: torch.optim.Optimizer) -> dict[str, Any]:
    """One optimiser's state dict from the state dicts of several, whose groups become its groups in order
    (their parameters numbered on); the group options other than the learning rates and moments come
    from ``optim`` (fused)."""
    state: dict[int, Any] = {}
    groups: list[dict[str, Any]] = []
    offset = 0
    for part in parts:
        for key, value in part["state"].items():
            state[int(key) + offset] = value
        for group in part["param_groups"]:
            mine = optim.param_groups[len(groups)]
            keep = {k: group[k] for k in ("lr", "betas", "eps", "weight_decay", "amsgrad") if k in group}
            groups.append({**{k: v for k, v in mine.items() if k != "params"}, **keep,
                           "params": [int(p) + offset for p in group["params"]]})
            offset += len(group["params"])
    return {"state": state, "param_groups": groups}


register("sac", SACConfig, SAC, SACPolicy, on_policy=False, defaults={"env": {"id": "Pendulum-v1", "num_envs": 1}})
