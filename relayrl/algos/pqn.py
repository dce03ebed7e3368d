"""Parallelised Q-Network (PQN: Gallici et al., ICLR 2025, "Simplifying Deep Temporal Difference Learning").

Q-learning from short rollouts of many envs, as PPO learns: no replay buffer, no target network. A LayerNorm
after every hidden layer keeps the bootstrapped targets stable; epsilon-greedy collection (epsilon decaying
linearly over ``epsilon_decay_steps`` env steps) explores; Q(lambda) returns over the rollout, bootstrapped with
max_a Q, are the regression targets of a few epochs of minibatches.

Reads top to bottom: config, network, policy (epsilon-greedy in "collect", argmax in "eval"), the algorithm,
registration.

The rollout is a RolloutStore's (data/rollout.py), like PPO's, so PQN runs wherever PPO does (inline, worker
pools, the relay's chunk checks): ``value`` holds max_a Q(s_t) under the mask the policy acted with, ``next_value``
max_a Q of the next observation (of the final one where an episode was truncated), and ``logp`` the log-probability
of the action under the epsilon-greedy policy (recorded, not learned from). The lambda-returns are then GAE's
returns (data/gae.py) with V(s) = max_a Q(s, a): G_t = r_t + gamma ((1 - lambda) V(s_t+1) + lambda G_t+1), cut at
episode ends, bootstrapped at truncations. Under action masks every max runs over the actions allowed at that
observation (``value_masked``, given the env's mask at the rollout's last observation and at truncations), as
DQN's target does.

Defaults: CleanRL's pqn.py (RAdam, 4 epochs of 4 minibatches, lambda 0.65, max_grad_norm 10, LayerNorm MLP 120x84,
epsilon 1 -> 0.05, MSE loss) with 16 envs of 32 steps, a constant lr of 1e-3 and epsilon decayed over 10,000 env
steps instead of half the run: CartPole-v1 reached an eval mean of 475 in 35k-60k env steps over seeds 0-3,
where CleanRL's lr (2.5e-4, annealed) with a 25k-step decay had not by 100k (seed 0: best eval 84).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field
from torch import nn

from relayrl.algos.dqn import DQNGraph
from relayrl.algos.registry import register
from relayrl.core import Algorithm, Policy
from relayrl.data.dtypes import stored_dtype, to_stored, to_tensor
from relayrl.data.gae import compute_gae
from relayrl.data.minibatches import step_minibatches
from relayrl.errors import ConfigError, EnvError, NonFiniteError
from relayrl.options import AlgoConfig
from relayrl.policy import distributions as D
from relayrl.policy.device import cpu_state, cpu_tree
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.encoders import check_space, make_encoder
from relayrl.policy.graph import ARGMAX, PolicyGraph
from relayrl.policy.networks import mlp
from relayrl.types import Batch, Mode, PolicyOutput

MIN_ENVS = 2  # env columns of a rollout below which PQN is refused (its data comes from many envs at once)


class PQNConfig(AlgoConfig):
    aliases: ClassVar[dict[str, str]] = {
        "learning_rate": "lr", "n_steps": "num_steps", "update_epochs": "epochs", "num_minibatches": "minibatches",
        "q_lambda": "lam", "lambda": "lam", "gae_lambda": "lam", "max_grad_norm": "grad_clip",
        "start_e": "epsilon_start", "end_e": "epsilon_end", "exploration_fraction": "epsilon_decay_steps",
        "net_arch": "hidden_sizes", "features_extractor_class": "encoder"}

    num_steps: int = Field(32, ge=1)
    """Vector steps collected per iteration (the rollout holds num_steps x env.num_envs steps)."""
    epochs: int = Field(4, ge=1)
    """Passes over each rollout (CleanRL's update_epochs)."""
    minibatches: int = Field(4, ge=1)
    """Minibatches per pass (CleanRL's num_minibatches)."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    lam: float = Field(0.65, ge=0.0, le=1.0)
    """Q(lambda)'s lambda: 0 gives one-step targets r + gamma max_a Q(s', a), 1 the rollout's discounted returns."""
    lr: float = Field(1e-3, gt=0.0)
    """RAdam learning rate (CleanRL's 2.5e-4, annealed, learned CartPole far slower: module docstring)."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over total_steps (CleanRL's default)."""
    grad_clip: float | None = Field(10.0, gt=0.0)
    """Maximum gradient norm (null: no clipping)."""
    reward_scale: float = Field(1.0, gt=0.0)
    """Multiply rewards by this before computing the returns (purejaxql's REW_SCALE)."""
    epsilon_start: float = Field(1.0, ge=0, le=1)
    """Exploration rate at the start."""
    epsilon_end: float = Field(0.05, ge=0, le=1)
    """Exploration rate after the decay."""
    epsilon_decay_steps: int = Field(10_000, ge=1)
    """Env steps over which epsilon decays linearly from epsilon_start to epsilon_end."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [120, 84])
    """Hidden layer sizes of the Q network (with an encoder: of its head on the features); CleanRL's 120x84."""
    layer_norm: bool = True
    """A LayerNorm after each hidden layer (what lets PQN learn without a target network)."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """Hidden activation."""
    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; the Q head (hidden_sizes,
    layer_norm) goes on top (docs/library.md, "Your own network"). null: the built-in choice from the observation
    space (docs/library.md, "Built-in encoders"): a CNN for images, one-hot for Discrete and MultiDiscrete, an MLP
    on flat observations."""

    def timing_sizes(self) -> tuple[list[int], int]:
        return list(self.hidden_sizes), 128


# ---------------------------------------------------------------- network


class QNetwork(nn.Module):
    """Q values of every action: an MLP with LayerNorms (``layer_norm``), on an encoder's features or on the
    flattened observations (``encoder`` None)."""

    def __init__(self, in_dim: int, n_actions: int, cfg: PQNConfig, encoder: nn.Module | None = None):
        super().__init__()
        self.encoder = encoder if encoder is not None else nn.Identity()
        self.q = mlp(in_dim, cfg.hidden_sizes, n_actions, cfg.activation, layer_norm=cfg.layer_norm)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(self.encoder(obs))


# ---------------------------------------------------------------- policy


class PQNPolicy(Policy):
    """Epsilon-greedy among the allowed actions in "collect" mode (``set_progress`` decays epsilon), greedy in
    "eval". In "collect" mode it also gives ``value`` = max_a Q(obs, a) and ``logp`` of the chosen action."""

    masks_actions = True

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: PQNConfig):
        if not isinstance(act_space, gym.spaces.Discrete):
            raise EnvError(f"PQN needs a Discrete action space (one Q value per action), got {act_space}: use ppo, "
                           "a2c or sac for continuous actions, dqn for MultiDiscrete ones")
        check_space(obs_space, "pqn.encoder")
        self.cfg = cfg
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_dtype = stored_dtype(obs_space.dtype)  # (refuses dtypes no network can read)
        self.n_actions = int(act_space.n)
        self.start = int(act_space.start)  # env action = index + start
        # yours (encoder), a built-in one for images and categories, or None (flat observations: the MLP)
        encoder = make_encoder(cfg.encoder, obs_space, act_space, "pqn.encoder")
        if encoder is None:
            self.model = QNetwork(int(np.prod(obs_space.shape)), self.n_actions, cfg)
        else:
            self.model = QNetwork(encoder[1], self.n_actions, cfg, encoder[0])
        # what the network reads: flattened observations, or [n, *obs_shape] as an encoder takes them
        self.obs_view: tuple[int, ...] = (-1,) if encoder is None else tuple(obs_space.shape)
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = np.dtype(np.int64)
        self.epsilon = cfg.epsilon_start
        self.version = 0

    def q_values(self, obs: np.ndarray) -> torch.Tensor:
        return self.model(to_tensor(obs, self.device).reshape(len(obs), *self.obs_view))

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect", action_mask: np.ndarray | None = None) -> PolicyOutput:
        stored = to_stored(obs)
        mask = None if action_mask is None else torch.from_numpy(action_mask).to(self.device)
        q = D.mask_logits(self.q_values(stored), mask)  # forbidden actions: -inf, never the max
        value, greedy = q.max(-1)
        if mode == "eval":
            action = greedy.cpu().numpy()
            return PolicyOutput(action=action, env_action=action + self.start if self.start else action)
        # ---- epsilon-greedy: a uniformly random allowed action with probability epsilon
        n = len(stored)
        allowed = torch.ones_like(q, dtype=torch.bool) if mask is None else mask
        count = allowed.sum(-1)
        scores = torch.rand(q.shape, device=q.device).masked_fill(~allowed, -1.0)
        explore = torch.rand(n, device=q.device) < self.epsilon
        action = torch.where(explore, scores.argmax(-1), greedy)
        prob = self.epsilon / count + (1.0 - self.epsilon) * (action == greedy)
        action_np = action.cpu().numpy()
        return PolicyOutput(action=action_np, env_action=action_np + self.start if self.start else action_np,
                            logp=prob.log().float().cpu().numpy(), value=value.float().cpu().numpy(), obs=stored)

    def value(self, obs: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """max_a Q(obs, a) over every action."""
        return self.value_masked(obs, None)

    @torch.inference_mode()
    def value_masked(self, obs: np.ndarray, action_mask: np.ndarray | None, rows: np.ndarray | None = None
                     ) -> np.ndarray:
        """max_a Q(obs, a) over the allowed actions (``action_mask``; None: all): what the returns bootstrap from,
        as DQN's target max runs over the actions allowed at the next observation."""
        mask = None if action_mask is None else torch.from_numpy(action_mask).to(self.device)
        return D.mask_logits(self.q_values(to_stored(obs)), mask).max(-1).values.float().cpu().numpy()

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        """Linear epsilon decay over ``epsilon_decay_steps`` env steps."""
        cfg = self.cfg
        frac = min(1.0, env_steps / cfg.epsilon_decay_steps)
        self.epsilon = cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)

    def export_graph(self) -> PolicyGraph:
        """``predict`` as one module for ``relayrl export``: the greedy action of the Q network (DQN's graph)."""
        return PolicyGraph(DQNGraph(self), ARGMAX)

    def to(self, device: torch.device) -> None:
        self.device = device
        self.model.to(device)

    def get_weights(self) -> dict[str, Any]:
        return {"model": cpu_state(self.model)}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.model.load_state_dict(weights["model"])
        if version is not None:
            self.version = version


# ---------------------------------------------------------------- algorithm


class PQN(Algorithm):
    """Learns from [T, N] rollouts: ``learn(rollout, progress)`` regresses Q(s_t, a_t) on the rollout's
    lambda-returns for ``epochs`` passes of ``minibatches`` minibatches, then moves epsilon on by the rollout's
    env steps."""

    devices = ("cpu", "cuda")

    def __init__(self, cfg: PQNConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        if num_envs < MIN_ENVS:
            raise ConfigError(f"PQN learns from rollouts of many envs at once (it has no replay buffer), but this run "
                              f"has {num_envs} env: set env.num_envs=16 (or more), or train with dqn on a single env")
        self.cfg = cfg
        self.policy = PQNPolicy(obs_space, act_space, cfg)
        self.optim = self.optimizer()
        self.env_steps = 0  # learned from so far: epsilon's schedule on the learner's own envs

    def optimizer(self) -> torch.optim.RAdam:
        return torch.optim.RAdam(self.policy.model.parameters(), lr=self.cfg.lr)

    def to(self, device: torch.device) -> None:
        self.device = device
        self.policy.to(device)
        self.optim = self.optimizer()  # (before any update: on the parameters as moved)

    def learn(self, rollout: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, model = self.cfg, self.policy.model
        T, N = rollout["value"].shape
        # ---- Q(lambda) returns: GAE's returns with V(s) = max_a Q(s, a) (module docstring)
        _, returns = compute_gae(rollout["reward"] * cfg.reward_scale, rollout["value"],
                                 rollout["next_value"], rollout["terminated"], rollout["truncated"], cfg.gamma, cfg.lam)
        steps = {"obs": to_tensor(rollout["obs"], self.device).reshape(T, N, *self.policy.obs_view),
                 "action": torch.from_numpy(rollout["action"]).to(self.device),
                 "return": torch.from_numpy(returns).to(self.device)}
        epoch = step_minibatches(steps, max(1, (T * N) // cfg.minibatches))
        lr = cfg.lr * max(0.0, 1.0 - progress) if cfg.anneal_lr else cfg.lr
        for group in self.optim.param_groups:
            group["lr"] = lr
        # ---- epochs of minibatches: 0.5 (Q(s, a) - G)^2
        loss_sum, q_sum, updates = 0.0, 0.0, 0
        for _ in range(cfg.epochs):
            for mb in epoch():
                if self.stopping():  # Ctrl-C: the rest of the iteration would take as long as it was going to
                    break
                q = model(mb["obs"]).gather(-1, mb["action"][:, None]).squeeze(-1)
                loss = 0.5 * (q - mb["return"]).pow(2).mean()
                if not torch.isfinite(loss):
                    raise NonFiniteError(f"PQN loss became {loss.item()}: lower pqn.lr or pqn.reward_scale, or "
                                         "check the rewards for NaN")
                self.optim.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                self.optim.step()
                loss_sum, q_sum, updates = loss_sum + loss.item(), q_sum + q.mean().item(), updates + 1
        self.env_steps += T * N
        self.policy.set_progress(self.env_steps, 0)
        self.policy.version += 1
        return {"loss/td": loss_sum / max(updates, 1), "q_mean": q_sum / max(updates, 1),
                "epsilon": self.policy.epsilon, "lr": lr, "updates": float(updates)}

    # ---- persistence: everything needed to continue training exactly
    def state_dict(self) -> dict[str, Any]:
        return {**self.policy.get_weights(), "version": self.policy.version, "env_steps": self.env_steps,
                "optim": cpu_tree(self.optim.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.optim.load_state_dict(state["optim"])
        self.env_steps = int(state["env_steps"])
        self.policy.set_progress(self.env_steps, 0)


register("pqn", PQNConfig, PQN, PQNPolicy, on_policy=True, defaults={"env": {"num_envs": 16}})
