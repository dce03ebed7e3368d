"""Behaviour cloning: a policy fitted to a dataset's actions (offline: no env steps, training/offline.py).

Box actions: a deterministic actor, tanh into [-1, 1] (scaled to the env's bounds), fitted by mean squared error
to the dataset's actions (scaled to [-1, 1] as they are loaded, data/datasets.py). Discrete actions: logits fitted
by cross-entropy; "eval" takes the argmax, "collect" samples. The baseline every offline method is measured
against (CORL's any_percent_bc, whose MSE loss and Adam it keeps; its sizes are Pendulum's here: 64x64 and a
learning rate of 1e-3, see the fields).

Reads top to bottom: config, networks, policy, the algorithm, registration.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from relayrl.algos.registry import register
from relayrl.core import Algorithm, Policy
from relayrl.data.datasets import action_bounds
from relayrl.data.dtypes import stored_dtype, to_tensor
from relayrl.errors import EnvError, NonFiniteError
from relayrl.options import OfflineConfig
from relayrl.policy import distributions as D
from relayrl.policy.device import cpu_state, cpu_tree
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.encoders import check_space, make_encoder
from relayrl.policy.graph import ARGMAX, ObservationInput, PolicyGraph
from relayrl.policy.networks import mlp
from relayrl.types import Batch, Mode, PolicyOutput


class BCConfig(OfflineConfig):
    aliases = {"learning_rate": "lr", "net_arch": "hidden_sizes", "features_extractor_class": "encoder"}

    lr: float = Field(1e-3, gt=0)
    """Learning rate (Adam)."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the policy network (64x64, as relayrl's SAC: it imitates Pendulum's policies as well as
    CORL's 256x256 at a quarter of the cost per update on a CPU; raise it for bigger tasks)."""
    encoder: EncoderRef = None
    """Your own network: "package.module:function", a function (observation_space, action_space) returning a
    torch.nn.Module that maps observations [n, *obs_shape] (float32) to features [n, F]; hidden_sizes sizes the
    head on it (docs/library.md, "Your own network"). null: the built-in choice from the observation space (a CNN
    for images, one-hot for Discrete and MultiDiscrete, an MLP on flat observations)."""


# ---------------------------------------------------------------- networks


def network(reference: str | None, obs_space: gym.Space, act_space: gym.Space, hidden: list[int], out_dim: int,
            key: str) -> tuple[nn.Module, tuple[int, ...]]:
    """An MLP of ``hidden`` (ReLU) to ``out_dim`` outputs on the observations, or on the features of an encoder
    (``reference``, or the built-in one for images and categories), and the view of the observations it reads:
    flattened, or [n, *obs_shape] for an encoder. IQL builds its networks with it too."""
    encoder = make_encoder(reference, obs_space, act_space, key)
    if encoder is None:
        return mlp(int(np.prod(obs_space.shape)), hidden, out_dim, "relu"), (-1,)
    module, features = encoder
    return nn.Sequential(module, mlp(features, hidden, out_dim, "relu")), tuple(obs_space.shape)


# ---------------------------------------------------------------- policy


class BCPolicy(Policy):
    """Box: tanh of the network, scaled to the bounds, in both modes. Discrete: argmax in "eval", a sample of the
    softmax in "collect"; action masks honoured."""

    masks_actions = True

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: BCConfig):
        self.discrete = isinstance(act_space, gym.spaces.Discrete)
        if not (self.discrete or isinstance(act_space, gym.spaces.Box)):
            raise EnvError(f"BC imitates Box or Discrete actions, not {act_space}: convert the action space with a "
                           "Gymnasium wrapper")
        check_space(obs_space, "bc.encoder")
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_dtype = stored_dtype(obs_space.dtype)
        if self.discrete:
            out_dim, self.start = int(act_space.n), int(act_space.start)
            self.action_shape, self.action_dtype = (), np.dtype(np.int64)
        else:
            self.low, self.scale = action_bounds(act_space, "BC")
            out_dim = int(np.prod(act_space.shape))
            self.action_shape, self.action_dtype = tuple(act_space.shape), np.dtype(np.float32)
        self.net, self.obs_view = network(cfg.encoder, obs_space, act_space, cfg.hidden_sizes, out_dim, "bc.encoder")
        self.version = 0

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """[n, ...] observations (as stored) -> logits (Discrete) or actions in [-1, 1] (Box)."""
        out = self.net(obs.reshape(len(obs), *self.obs_view))
        return out if self.discrete else torch.tanh(out)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect", action_mask: np.ndarray | None = None) -> PolicyOutput:
        out = self.forward(to_tensor(obs, self.device))
        if not self.discrete:
            action = out.cpu().numpy().reshape(len(obs), *self.action_shape)
            return PolicyOutput(action=action, env_action=self.low + (action + 1) * self.scale)
        logits = D.mask_logits(out, None if action_mask is None else torch.from_numpy(action_mask).to(out.device))
        index = (torch.distributions.Categorical(logits=logits).sample() if mode == "collect"
                 else logits.argmax(-1)).cpu().numpy()
        return PolicyOutput(action=index, env_action=index + self.start)

    def export_graph(self) -> PolicyGraph:
        """``predict`` as one module for ``relayrl export``."""
        return PolicyGraph(BCGraph(self), ARGMAX if self.discrete else "tanh squash scaled to the action bounds")

    def get_weights(self) -> dict[str, Any]:
        return {"net": cpu_state(self.net)}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.net.load_state_dict(weights["net"])
        if version is not None:
            self.version = version


class BCGraph(nn.Module):
    """``predict(obs)``: the argmax of the logits (+ the space's start), or tanh scaled to the action bounds."""

    def __init__(self, policy: BCPolicy):
        super().__init__()
        self.observation, self.net, self.discrete = ObservationInput(None, policy.obs_view), policy.net, policy.discrete
        self.shape = tuple(policy.action_shape)
        if policy.discrete:
            self.start = policy.start
        else:
            self.register_buffer("low", torch.tensor(policy.low))
            self.register_buffer("scale", torch.tensor(policy.scale))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(self.observation(obs))
        if self.discrete:
            return out.argmax(-1) + self.start
        return self.low + (torch.tanh(out).reshape((out.shape[0],) + self.shape) + 1) * self.scale


# ---------------------------------------------------------------- algorithm


class BC(Algorithm):
    """``learn(batch)`` takes a minibatch of the dataset (obs, action) and fits the policy to its actions."""

    devices = ("cpu", "cuda")

    def __init__(self, cfg: BCConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = BCPolicy(obs_space, act_space, cfg)
        self.optim = torch.optim.Adam(self.policy.net.parameters(), lr=cfg.lr)
        self.updates = 0

    def to(self, device: torch.device) -> None:
        self.device = self.policy.device = device
        self.policy.net.to(device)

    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        device, policy = self.device, self.policy
        out = policy.forward(to_tensor(batch["obs"], device))
        if policy.discrete:  # ---- cross-entropy of the dataset's action
            target = torch.as_tensor(np.asarray(batch["action"], np.int64), device=device)
            loss = F.cross_entropy(out, target)
            metrics = {"accuracy": (out.argmax(-1) == target).float().mean().item()}
        else:  # ---- squared error to the dataset's action, both in [-1, 1]
            loss = F.mse_loss(out, to_tensor(batch["action"], device).reshape(out.shape))
            metrics = {}
        if not torch.isfinite(loss):
            raise NonFiniteError(f"BC loss became {loss.item()}: lower bc.lr or check the dataset")
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        self.optim.step()
        self.updates += 1
        policy.version += 1
        return {"loss/bc": loss.item(), **metrics, "updates": 1.0}

    def state_dict(self) -> dict[str, Any]:
        return cpu_tree({**self.policy.get_weights(), "optim": self.optim.state_dict(), "updates": self.updates,
                         "version": self.policy.version})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.optim.load_state_dict(state["optim"])
        self.updates = int(state["updates"])


register("bc", BCConfig, BC, BCPolicy, on_policy=False, offline=True,
         defaults={"env": {"id": "Pendulum-v1", "num_envs": 1}, "total_steps": 20_000, "eval": {"freq": 2000}})
