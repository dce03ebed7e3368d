"""Proximal Policy Optimisation (clipped surrogate, GAE, KL early stop), after roadrunner's PPO.

Reads top to bottom: config, network, policy (collect / eval modes over one model), the algorithm
(reward scaling, GAE, minibatch epochs), registration.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field
from torch import nn

from relayrl.algos import register
from relayrl.config import Section
from relayrl.data.gae import compute_gae
from relayrl.errors import EnvError, NonFiniteError
from relayrl.policy import distributions as D
from relayrl.policy.networks import mlp
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.types import Batch, Mode, PolicyOutput


class PPOConfig(Section):
    aliases: ClassVar[dict[str, str]] = {
        "learning_rate": "actor_lr,critic_lr", "lr": "actor_lr,critic_lr", "n_epochs": "epochs",
        "n_steps": "num_steps", "ent_coef": "entropy_coef", "clip_range": "clip", "clip_range_vf": "value_clip",
        "max_grad_norm": "grad_clip", "target_kl": "kl", "discount": "gamma", "lam": "gae_lambda",
        "minibatch_size": "batch_size", "normalize_advantages": "normalize_advantage", "norm_obs": "obs_norm",
        "norm_reward": "normalize_reward", "net_arch": "hidden_sizes", "eps": "adam_eps"}

    num_steps: int = Field(64, ge=1)
    """Vector steps collected per iteration (the rollout holds num_steps x env.num_envs steps)."""
    epochs: int = Field(5, ge=1)
    """Passes over each rollout."""
    batch_size: int = Field(256, ge=1)
    """Minibatch size in steps."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    """GAE lambda (bias-variance trade-off of the advantage)."""
    actor_lr: float = Field(3e-3, gt=0.0)
    """Actor learning rate (Adam)."""
    critic_lr: float = Field(3e-3, gt=0.0)
    """Critic learning rate (Adam)."""
    adam_eps: float = Field(1e-5, gt=0.0)
    """Adam epsilon."""
    anneal_lr: bool = True
    """Decay both learning rates linearly to 0 over total_steps."""
    clip: float = Field(0.2, gt=0.0)
    """Surrogate clipping range: the ratio is clipped to 1 +- clip."""
    anneal_clip: bool = False
    """Decay the clipping range linearly to 0 over total_steps."""
    value_clip: float | None = Field(None, gt=0.0)
    """Clip the value update to +- this around the old value (null: no clipping)."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Entropy bonus coefficient."""
    grad_clip: float | None = Field(0.5, gt=0.0)
    """Maximum gradient norm, per network (null: no clipping)."""
    kl: float | None = Field(None, gt=0.0)
    """Stop the iteration's remaining minibatches once the approximate KL exceeds this (null: never)."""
    normalize_advantage: bool = True
    """Normalise advantages per minibatch."""
    obs_norm: bool = False
    """Normalise observations with a running mean and std."""
    update_norm: bool = True
    """Update the observation statistics from collected data (only with obs_norm)."""
    prenorm: bool = False
    """Fill the observation statistics before training by running the initial policy."""
    prenormalize_steps: int = Field(1000, ge=1)
    """Vector steps run to fill the statistics when prenorm is on."""
    reward_scale: float = Field(1.0, gt=0.0)
    """Multiply rewards by this before computing advantages."""
    normalize_reward: bool = True
    """Divide rewards by the running std of the discounted return."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor and of the critic."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "tanh"
    """Hidden activation."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""


# ---------------------------------------------------------------- network


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs; a state-independent log std for continuous actions."""

    def __init__(self, obs_dim: int, act_dim: int, discrete: bool, cfg: PPOConfig):
        super().__init__()
        self.discrete = discrete
        self.actor = mlp(obs_dim, cfg.hidden_sizes, act_dim, cfg.activation, out_gain=0.01)
        self.critic = mlp(obs_dim, cfg.hidden_sizes, 1, cfg.activation, out_gain=1.0)
        self.log_std = nn.Parameter(torch.full((act_dim,), cfg.log_std_init)) if not discrete else None

    def actor_parameters(self) -> list[nn.Parameter]:
        return [*self.actor.parameters(), *([self.log_std] if self.log_std is not None else [])]

    def logp_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.actor(obs)
        if self.discrete:
            return D.categorical_logp_entropy(out, actions)
        log_std = self.log_std.expand_as(out)
        return D.gaussian_logp(out, log_std, actions), D.gaussian_entropy(log_std)


# ---------------------------------------------------------------- policy


class PPOPolicy:
    """``act(obs, mode)`` samples in "collect" mode and is deterministic in "eval" mode."""

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: PPOConfig):
        if not isinstance(obs_space, gym.spaces.Box):
            raise EnvError(f"PPO needs a Box observation space, got {obs_space}")
        self.discrete = isinstance(act_space, gym.spaces.Discrete)
        if not self.discrete and not isinstance(act_space, gym.spaces.Box):
            raise EnvError(f"PPO handles Discrete and Box action spaces, got {act_space}")
        self.cfg = cfg
        self.obs_shape = obs_space.shape
        obs_dim = int(np.prod(obs_space.shape))
        act_dim = int(act_space.n) if self.discrete else int(np.prod(act_space.shape))
        self.action_shape: tuple[int, ...] = () if self.discrete else act_space.shape
        self.action_dtype = np.dtype(np.int64) if self.discrete else np.dtype(np.float32)
        if not self.discrete:
            self.low = act_space.low.astype(np.float32)
            self.high = act_space.high.astype(np.float32)
        self.model = ActorCritic(obs_dim, act_dim, self.discrete, cfg)
        self.obs_rms = RunningMeanStd(obs_space.shape) if cfg.obs_norm else None
        self.update_norm = cfg.update_norm
        self.version = 0

    def preprocess(self, obs: np.ndarray, update: bool) -> np.ndarray:
        if self.obs_rms is None:
            return np.asarray(obs, dtype=np.float32)
        if update:
            self.obs_rms.update(obs)
        return self.obs_rms.normalize(obs)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect") -> PolicyOutput:
        collect = mode == "collect"
        x = self.preprocess(obs, update=collect and self.update_norm)
        xt = torch.from_numpy(x).reshape(len(x), -1)
        out = self.model.actor(xt)
        if self.discrete:
            action = D.categorical_sample(out) if collect else out.argmax(-1)
            logp = D.categorical_logp(out, action) if collect else None
            action_np = action.numpy()
            env_action = action_np
        else:
            std = self.model.log_std.exp()
            action = out + std * torch.randn_like(out) if collect else out
            logp = D.gaussian_logp(out, self.model.log_std.expand_as(out), action) if collect else None
            action_np = action.numpy().reshape(len(x), *self.action_shape)
            env_action = np.clip(action_np, self.low, self.high)
        value = self.model.critic(xt).squeeze(-1).numpy() if collect else None
        return PolicyOutput(action=action_np, env_action=env_action,
                            logp=None if logp is None else logp.numpy(), value=value, obs=x)

    @torch.inference_mode()
    def value(self, obs: np.ndarray) -> np.ndarray:
        x = self.preprocess(obs, update=False)
        return self.model.critic(torch.from_numpy(x).reshape(len(x), -1)).squeeze(-1).numpy()

    def get_weights(self) -> dict[str, Any]:
        """Model parameters plus observation statistics (everything `act` depends on)."""
        state: dict[str, Any] = {"model": self.model.state_dict()}
        if self.obs_rms is not None:
            state["obs_rms"] = self.obs_rms.state_dict()
        return state

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.model.load_state_dict(weights["model"])
        if self.obs_rms is not None and "obs_rms" in weights:
            self.obs_rms.load_state_dict(weights["obs_rms"])
        if version is not None:
            self.version = version


# ---------------------------------------------------------------- algorithm


class PPO:
    """Learns from [T, N] rollouts: ``learn(rollout, progress)`` returns metrics."""

    def __init__(self, cfg: PPOConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = PPOPolicy(obs_space, act_space, cfg)
        model = self.policy.model
        # fused Adam: one kernel per step instead of a Python loop over parameters (~20% of an update here)
        self.actor_optim = torch.optim.Adam(model.actor_parameters(), lr=cfg.actor_lr, eps=cfg.adam_eps, fused=True)
        self.critic_optim = torch.optim.Adam(model.critic.parameters(), lr=cfg.critic_lr, eps=cfg.adam_eps, fused=True)
        self.ret_rms = RunningMeanStd(()) if cfg.normalize_reward else None
        self._ret = np.zeros(num_envs, dtype=np.float64)

    # Rewards are scaled in collection order, so the running return sees steps as they happened.
    def scale_rewards(self, rollout: Batch) -> np.ndarray:
        rewards = rollout["reward"] * self.cfg.reward_scale
        if self.ret_rms is None:
            return rewards
        done = rollout["terminated"] | rollout["truncated"]
        columns = rollout["column"][0] if "column" in rollout else np.arange(len(self._ret))  # see runtime/pool.py
        running = self._ret[columns]
        for t in range(len(rewards)):
            running = running * self.cfg.gamma + rewards[t]
            self.ret_rms.update(running)
            running[done[t]] = 0.0
        self._ret[columns] = running
        return (rewards / self.ret_rms.std).astype(np.float32)

    def targets(self, rollout: Batch, rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Advantages and value targets: GAE per trajectory; truncated episodes bootstrap from V(final obs)."""
        return compute_gae(rewards, rollout["value"], rollout["next_value"], rollout["terminated"],
                           rollout["truncated"], self.cfg.gamma, self.cfg.gae_lambda)

    def learn(self, rollout: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg = self.cfg
        adv, ret = self.targets(rollout, self.scale_rewards(rollout))
        n = adv.size
        obs = torch.from_numpy(rollout["obs"].reshape(n, -1))
        actions = torch.from_numpy(rollout["action"].reshape(n, *rollout["action"].shape[2:]))
        old_logp = torch.from_numpy(rollout["logp"].reshape(n))
        old_value = torch.from_numpy(rollout["value"].reshape(n))
        advantages = torch.from_numpy(adv.reshape(n))
        returns = torch.from_numpy(ret.reshape(n))

        frac = max(0.0, 1.0 - progress)
        actor_lr = cfg.actor_lr * frac if cfg.anneal_lr else cfg.actor_lr
        critic_lr = cfg.critic_lr * frac if cfg.anneal_lr else cfg.critic_lr
        for group in self.actor_optim.param_groups:
            group["lr"] = actor_lr
        for group in self.critic_optim.param_groups:
            group["lr"] = critic_lr
        clip = cfg.clip * frac if cfg.anneal_clip else cfg.clip

        model = self.policy.model
        sums = {"loss/policy": 0.0, "loss/value": 0.0, "loss/entropy": 0.0, "approx_kl": 0.0, "clip_frac": 0.0}
        updates, kl_stop = 0, False
        mb = min(cfg.batch_size, n)
        for _ in range(cfg.epochs):
            perm = torch.randperm(n)
            for start in range(0, n - mb + 1, mb):
                idx = perm[start:start + mb]
                # ---- clipped surrogate
                logp, entropy = model.logp_entropy(obs[idx], actions[idx])
                log_ratio = logp - old_logp[idx]
                ratio = log_ratio.exp()
                adv_b = advantages[idx]
                if cfg.normalize_advantage and mb > 1:
                    adv_b = (adv_b - adv_b.mean()) / (adv_b.std() + 1e-8)
                policy_loss = -torch.min(ratio * adv_b, ratio.clamp(1 - clip, 1 + clip) * adv_b).mean()
                entropy_mean = entropy.mean()
                # ---- value loss, optionally clipped around the collection-time value
                value = model.critic(obs[idx]).squeeze(-1)
                if cfg.value_clip is None:
                    value_loss = 0.5 * (value - returns[idx]).pow(2).mean()
                else:
                    clipped = old_value[idx] + (value - old_value[idx]).clamp(-cfg.value_clip, cfg.value_clip)
                    value_loss = 0.5 * torch.max((value - returns[idx]).pow(2),
                                                 (clipped - returns[idx]).pow(2)).mean()
                loss = policy_loss - cfg.entropy_coef * entropy_mean + value_loss
                if not torch.isfinite(loss):
                    raise NonFiniteError(
                        f"PPO loss became {loss.item()} (policy {policy_loss.item()}, value {value_loss.item()}): "
                        "lower the learning rates, enable obs_norm / normalize_reward, or lower reward_scale")
                self.actor_optim.zero_grad(set_to_none=True)
                self.critic_optim.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip is not None:
                    nn.utils.clip_grad_norm_(model.actor_parameters(), cfg.grad_clip)
                    nn.utils.clip_grad_norm_(model.critic.parameters(), cfg.grad_clip)
                self.actor_optim.step()
                self.critic_optim.step()
                updates += 1
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).mean().item()
                    sums["clip_frac"] += ((ratio - 1).abs() > clip).float().mean().item()
                sums["loss/policy"] += policy_loss.item()
                sums["loss/value"] += value_loss.item()
                sums["loss/entropy"] += entropy_mean.item()
                sums["approx_kl"] += approx_kl
                if cfg.kl is not None and approx_kl > cfg.kl:
                    kl_stop = True
                    break
            if kl_stop:
                break

        metrics = {key: value / max(updates, 1) for key, value in sums.items()}
        y, v = ret.reshape(-1), rollout["value"].reshape(-1)
        var_y = float(np.var(y))
        metrics.update({
            "explained_variance": float("nan") if var_y == 0 else 1.0 - float(np.var(y - v)) / var_y,
            "lr/actor": actor_lr, "lr/critic": critic_lr, "clip": clip,
            "updates": float(updates), "kl_stop": float(kl_stop),
        })
        self.policy.version += 1
        return metrics

    # ---- persistence: everything needed to continue training exactly
    def state_dict(self) -> dict[str, Any]:
        state = {**self.policy.get_weights(), "version": self.policy.version,
                 "actor_optim": self.actor_optim.state_dict(), "critic_optim": self.critic_optim.state_dict(),
                 "ret": self._ret.copy()}
        if self.ret_rms is not None:
            state["ret_rms"] = self.ret_rms.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        if self.ret_rms is not None and "ret_rms" in state:
            self.ret_rms.load_state_dict(state["ret_rms"])
        if len(state["ret"]) == len(self._ret):
            self._ret = np.asarray(state["ret"], dtype=np.float64).copy()


register("ppo", PPOConfig, PPO, on_policy=True)
