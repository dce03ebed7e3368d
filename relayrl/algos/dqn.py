"""Deep Q-Network with double-Q targets, an optional dueling head, n-step returns and prioritized replay.

Reads top to bottom: config, network, policy (epsilon-greedy in "collect", argmax in "eval"), the
algorithm (Huber TD loss on replay minibatches, target network), registration.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from relayrl.algos import register
from relayrl.config import ReplayLoopConfig
from relayrl.core import Algorithm, Policy
from relayrl.data.dtypes import stored_dtype, to_tensor
from relayrl.policy.device import cpu_state
from relayrl.errors import EnvError, NonFiniteError
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.encoders import check_space, make_encoder
from relayrl.policy.networks import mlp
from relayrl.types import Batch, Mode, PolicyOutput


class DQNConfig(ReplayLoopConfig):
    aliases: ClassVar[dict[str, str]] = {
        "learning_rate": "lr", "learning_starts": "start_training", "target_update_interval": "target_update_period",
        "exploration_final_eps": "epsilon_end", "exploration_fraction": "epsilon_decay_steps", "n_steps": "n_step",
        "net_arch": "hidden_sizes", "max_grad_norm": "grad_clip", "alpha": "priority_alpha", "beta": "priority_beta",
        "features_extractor_class": "encoder"}

    buffer_size: int = Field(100_000, ge=1)
    """Replay capacity in transitions."""
    batch_size: int = Field(64, ge=1)
    """Minibatch size per update."""
    steps_per_iteration: int = Field(32, ge=1)
    """Vector steps collected between two rounds of updates."""
    updates_per_step: float = Field(0.5, gt=0)
    """Updates per env step (0.5: one update every two env steps)."""
    lr: float = Field(2.3e-3, gt=0)
    """Adam learning rate."""
    grad_clip: float | None = Field(10.0, gt=0)
    """Maximum gradient norm (null: no clipping)."""
    double: bool = True
    """Pick the next action with the online network and value it with the target network."""
    dueling: bool = False
    """Separate value and advantage streams."""
    target_update_period: int = Field(128, ge=1)
    """Copy the online network into the target every this many updates (when tau is null)."""
    tau: float | None = Field(None, gt=0, le=1)
    """Soft target update rate per update (null: periodic hard copies)."""
    epsilon_start: float = Field(1.0, ge=0, le=1)
    """Exploration rate at the start."""
    epsilon_end: float = Field(0.04, ge=0, le=1)
    """Exploration rate after the decay."""
    epsilon_decay_steps: int = Field(8000, ge=1)
    """Env steps over which epsilon decays linearly from epsilon_start to epsilon_end."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [256, 256])
    """Hidden layer sizes."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """Hidden activation."""
    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; the Q head (hidden_sizes,
    dueling) goes on top, and the target network is a copy (docs/library.md, "Your own network"). null: the
    built-in choice from the observation space (docs/library.md, "Built-in encoders"): a CNN for images, one-hot
    for Discrete and MultiDiscrete, an MLP on flat observations."""


# ---------------------------------------------------------------- network


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, cfg: DQNConfig):
        super().__init__()
        self.dueling = cfg.dueling
        if cfg.dueling:
            self.trunk = mlp(obs_dim, cfg.hidden_sizes[:-1], cfg.hidden_sizes[-1], cfg.activation)
            self.value = nn.Linear(cfg.hidden_sizes[-1], 1)
            self.advantage = nn.Linear(cfg.hidden_sizes[-1], n_actions)
        else:
            self.q = mlp(obs_dim, cfg.hidden_sizes, n_actions, cfg.activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.dueling:
            return self.q(obs)
        h = F.relu(self.trunk(obs))
        advantage = self.advantage(h)
        return self.value(h) + advantage - advantage.mean(-1, keepdim=True)


class EncodedQNetwork(QNetwork):
    """The Q head (``hidden_sizes``, ``dueling``) on the features of your encoder (``encoder``)."""

    def __init__(self, encoder: nn.Module, features: int, n_actions: int, cfg: DQNConfig):
        super().__init__(features, n_actions, cfg)
        self.encoder = encoder

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(self.encoder(obs))


# ---------------------------------------------------------------- policy


class DQNPolicy(Policy):
    """Epsilon-greedy in "collect" mode (epsilon decays linearly over ``epsilon_decay_steps`` env steps as
    ``set_progress`` reports them), greedy in "eval"."""

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: DQNConfig):
        if not isinstance(act_space, gym.spaces.Discrete):
            raise EnvError(f"DQN needs a Discrete action space, got {act_space}: use SAC or PPO for continuous actions")
        check_space(obs_space, "dqn.encoder")
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_dtype = stored_dtype(obs_space.dtype)  # (refuses dtypes no network can read)
        self.cfg = cfg
        self.n_actions = int(act_space.n)
        # yours (encoder), a built-in one for images and categories, or None (flat observations: the MLP)
        encoder = make_encoder(cfg.encoder, obs_space, act_space, "dqn.encoder")
        if encoder is None:
            self.model: QNetwork = QNetwork(int(np.prod(obs_space.shape)), self.n_actions, cfg)
        else:
            self.model = EncodedQNetwork(*encoder, self.n_actions, cfg)
        self.encoded = encoder is not None
        # what the network reads: flattened observations, or [n, *obs_shape] as an encoder takes them
        self.obs_view: tuple[int, ...] = (-1,) if encoder is None else tuple(obs_space.shape)
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = np.dtype(np.int64)
        self.epsilon = cfg.epsilon_start
        self.version = 0
        self.rng = np.random.default_rng(int(torch.randint(2**31, ()).item()))  # follows torch.manual_seed

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect") -> PolicyOutput:
        x = to_tensor(obs, self.device).reshape(len(obs), *self.obs_view)
        greedy = self.model(x).argmax(-1).cpu().numpy()
        if mode == "collect" and self.epsilon > 0:
            explore = self.rng.random(len(greedy)) < self.epsilon
            greedy = np.where(explore, self.rng.integers(0, self.n_actions, len(greedy)), greedy)
        return PolicyOutput(action=greedy, env_action=greedy)

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        """Linear epsilon decay over ``epsilon_decay_steps`` env steps."""
        cfg = self.cfg
        frac = min(1.0, env_steps / cfg.epsilon_decay_steps)
        self.epsilon = cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)

    def get_weights(self) -> dict[str, Any]:
        return {"model": cpu_state(self.model)}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.model.load_state_dict(weights["model"])
        if version is not None:
            self.version = version


# ---------------------------------------------------------------- algorithm


class DQN(Algorithm):
    """``learn(batch)`` takes a replay minibatch (obs, action, reward, next_obs, terminated, discount,
    weight) and writes ``batch["priority"]`` (|TD error|) for prioritized replay."""

    def __init__(self, cfg: DQNConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = DQNPolicy(obs_space, act_space, cfg)
        if not self.policy.encoded:
            self.target = QNetwork(int(np.prod(obs_space.shape)), self.policy.n_actions, cfg)
            self.target.load_state_dict(self.policy.model.state_dict())
        else:  # the encoder too (one factory call per network trained)
            self.target = copy.deepcopy(self.policy.model)
        self.target.requires_grad_(False)
        self.optim = torch.optim.Adam(self.policy.model.parameters(), lr=cfg.lr, fused=True)
        self.updates = 0

    devices = ("cpu", "cuda")

    def to(self, device: torch.device) -> None:
        self.device = self.policy.device = device
        self.policy.model.to(device)  # (parameters move in place: the optimiser keeps them)
        self.target.to(device)

    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, model = self.cfg, self.policy.model
        view = self.policy.obs_view
        device = self.device  # the batch moves to the learner's device once, as stored
        obs = to_tensor(batch["obs"], device).reshape(len(batch["obs"]), *view)
        next_obs = to_tensor(batch["next_obs"], device).reshape(len(obs), *view)
        actions = torch.from_numpy(batch["action"]).to(device).long()
        # ---- double-Q target: y = r + γ^m (1 - terminated) Q_target(s', argmax_a Q_online(s', a));
        # one online pass over [s; s'] serves both the prediction and the argmax (half the op overhead)
        online = model(torch.cat([obs, next_obs])) if cfg.double else model(obs)
        q = online[:len(obs)].gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_q = self.target(next_obs)
            if cfg.double:
                best = online[len(obs):].argmax(-1, keepdim=True)
                next_value = next_q.gather(-1, best).squeeze(-1)
            else:
                next_value = next_q.max(-1).values
            not_done = 1.0 - to_tensor(batch["terminated"], device)
            target = to_tensor(batch["reward"], device) + to_tensor(batch["discount"], device) * not_done * next_value
        td = q - target
        weight = to_tensor(batch["weight"], device) if "weight" in batch else torch.ones_like(td)
        loss = (weight * F.smooth_l1_loss(q, target, reduction="none")).mean()
        if not torch.isfinite(loss):
            raise NonFiniteError(f"DQN loss became {loss.item()}: lower lr, or check the rewards for NaN")
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        self.optim.step()
        self.updates += 1
        # ---- target network: soft (tau) or a hard copy every target_update_period updates
        if cfg.tau is not None:
            with torch.no_grad():
                for p_t, p in zip(self.target.parameters(), model.parameters()):
                    p_t.lerp_(p, cfg.tau)
        elif self.updates % cfg.target_update_period == 0:
            self.target.load_state_dict(model.state_dict())
        batch["priority"] = td.detach().abs().cpu().numpy()
        self.policy.version += 1
        return {"loss/td": loss.item(), "q_mean": q.mean().item(), "epsilon": self.policy.epsilon, "updates": 1.0}

    def state_dict(self) -> dict[str, Any]:
        return {**self.policy.get_weights(), "target": self.target.state_dict(), "optim": self.optim.state_dict(),
                "updates": self.updates, "version": self.policy.version, "epsilon": self.policy.epsilon,
                "rng": self.policy.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.target.load_state_dict(state["target"])
        self.optim.load_state_dict(state["optim"])
        self.updates, self.policy.epsilon = int(state["updates"]), float(state["epsilon"])
        self.policy.rng.bit_generator.state = state["rng"]


register("dqn", DQNConfig, DQN, DQNPolicy, on_policy=False)
