"""Deep Q-Network with double-Q targets, an optional dueling head, n-step returns and prioritized replay.

Reads top to bottom: config, network, policy (epsilon-greedy in "collect", argmax in "eval"), the
algorithm (Huber TD loss on replay minibatches, target network), registration.

Action masks (relayrl/envs/masks.py): the greedy action is the best allowed one, exploration draws
among the allowed actions, and the target's max runs over the actions allowed at the next
observation (replay stores ``next_action_mask``). MultiDiscrete actions use action branching (BDQ,
Tavakoli et al. 2018): one Q head per branch on the shared network (the output layer holds the
branches side by side, dueling centres each branch's advantages), each branch greedy on its own,
one target for all branches (the mean of the branches' next values) and a loss averaged over them.
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

from relayrl.algos.compiled import CompiledLoss
from relayrl.algos.registry import register
from relayrl.core import Algorithm, Policy
from relayrl.data.dtypes import stored_dtype, to_tensor
from relayrl.envs.masks import branch_sizes
from relayrl.errors import EnvError, NonFiniteError
from relayrl.learners.collective import Collective, per_learner
from relayrl.options import CompiledUpdateConfig, ReplayLoopConfig
from relayrl.policy import distributions as D
from relayrl.policy.device import cpu_state, cpu_tree, float_to_device, host_to_device
from relayrl.policy.encoder import EncoderRef
from relayrl.policy.encoders import check_space, make_encoder
from relayrl.policy.graph import ARGMAX, ObservationInput, PolicyGraph
from relayrl.policy.networks import mlp
from relayrl.types import Batch, Mode, PolicyOutput


class DQNConfig(ReplayLoopConfig, CompiledUpdateConfig):
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
    gamma: float = Field(0.98, ge=0.0, le=1.0)
    """Discount factor (0.98: with n_step 3, CartPole's values settle sooner than at 0.99)."""
    n_step: int | None = Field(None, ge=1)
    """Steps summed into each return before bootstrapping (null: 3 on vector envs, where rewards then reach
    earlier states three times faster than with one-step targets; 1 on agent envs, whose transitions are
    one-step)."""
    vector_n_step: ClassVar[int] = 3
    hidden_sizes: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes (64x64: an update costs half of 256x256's on a CPU, and with gamma 0.98 and
    n_step 3 it solved CartPole in fewer env steps than RL Zoo's 256x256 settings; docs/benchmarks.md)."""

    def timing_sizes(self) -> tuple[list[int], int]:
        return list(self.hidden_sizes), self.batch_size

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
    def __init__(self, obs_dim: int, n_actions: int, cfg: DQNConfig, branches: tuple[int, ...] | None = None):
        super().__init__()
        self.branches = branches or (n_actions,)  # Q values of every branch, side by side
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
        if len(self.branches) > 1:  # each branch's advantages centred on their own mean
            return self.value(h) + torch.cat([a - a.mean(-1, keepdim=True)
                                              for a in advantage.split(self.branches, -1)], -1)
        return self.value(h) + advantage - advantage.mean(-1, keepdim=True)


class EncodedQNetwork(QNetwork):
    """The Q head (``hidden_sizes``, ``dueling``) on the features of your encoder (``encoder``)."""

    def __init__(self, encoder: nn.Module, features: int, n_actions: int, cfg: DQNConfig,
                 branches: tuple[int, ...] | None = None):
        super().__init__(features, n_actions, cfg, branches)
        self.encoder = encoder

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(self.encoder(obs))


# ---------------------------------------------------------------- policy


class DQNPolicy(Policy):
    """Epsilon-greedy in "collect" mode (epsilon decays linearly over ``epsilon_decay_steps`` env steps as
    ``set_progress`` reports them), greedy in "eval"."""

    masks_actions = True

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: DQNConfig):
        self.branches = branch_sizes(act_space)
        if self.branches is None:
            raise EnvError(f"DQN needs a Discrete or MultiDiscrete (one axis of branches) action space, got "
                           f"{act_space}: use SAC or PPO for continuous actions")
        check_space(obs_space, "dqn.encoder")
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_dtype = stored_dtype(obs_space.dtype)  # (refuses dtypes no network can read)
        self.cfg = cfg
        self.n_actions = sum(self.branches)  # Q values per observation: every branch's options
        self.multi = isinstance(act_space, gym.spaces.MultiDiscrete)
        self.start = np.asarray(act_space.start, dtype=np.int64)  # env action = index + start
        # yours (encoder), a built-in one for images and categories, or None (flat observations: the MLP)
        encoder = make_encoder(cfg.encoder, obs_space, act_space, "dqn.encoder")
        if encoder is None:
            self.model: QNetwork = QNetwork(int(np.prod(obs_space.shape)), self.n_actions, cfg, self.branches)
        else:
            self.model = EncodedQNetwork(*encoder, self.n_actions, cfg, self.branches)
        self.encoded = encoder is not None
        # what the network reads: flattened observations, or [n, *obs_shape] as an encoder takes them
        self.obs_view: tuple[int, ...] = (-1,) if encoder is None else tuple(obs_space.shape)
        self.action_shape: tuple[int, ...] = tuple(act_space.shape)  # () for Discrete, (B,) for MultiDiscrete
        self.action_dtype = np.dtype(np.int64)
        self.epsilon = cfg.epsilon_start
        self.version = 0
        self.rng = np.random.default_rng(int(torch.randint(2**31, ()).item()))  # follows torch.manual_seed

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect", action_mask: np.ndarray | None = None) -> PolicyOutput:
        x = to_tensor(obs, self.device).reshape(len(obs), *self.obs_view)
        q = self.model(x)
        if action_mask is None and not self.multi:  # (the plain Discrete path, unchanged)
            greedy = q.argmax(-1).cpu().numpy()
            if mode == "collect" and self.epsilon > 0:
                explore = self.rng.random(len(greedy)) < self.epsilon
                greedy = np.where(explore, self.rng.integers(0, self.n_actions, len(greedy)), greedy)
            return PolicyOutput(action=greedy, env_action=greedy + self.start if self.start.any() else greedy)
        greedy = branch_argmax(q, self.branches, None if action_mask is None else
                               torch.from_numpy(action_mask).to(q.device))
        if mode == "collect" and self.epsilon > 0:  # a random allowed option of each branch
            explore = self.rng.random(len(greedy)) < self.epsilon
            scores = self.rng.random((len(greedy), self.n_actions))
            if action_mask is not None:
                scores[~action_mask] = -1.0
            randoms = branch_argmax(torch.from_numpy(scores), self.branches)
            greedy = np.where(explore[:, None], randoms, greedy)
        action = greedy if self.multi else greedy[:, 0]
        return PolicyOutput(action=action, env_action=action + self.start if self.start.any() else action)

    def set_progress(self, env_steps: int, total_steps: int) -> None:
        """Linear epsilon decay over ``epsilon_decay_steps`` env steps."""
        cfg = self.cfg
        frac = min(1.0, env_steps / cfg.epsilon_decay_steps)
        self.epsilon = cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)

    def export_graph(self) -> PolicyGraph:
        """``predict`` as one module for ``relayrl export``: the greedy action of the Q network."""
        return PolicyGraph(DQNGraph(self), ARGMAX)

    def get_weights(self) -> dict[str, Any]:
        return {"model": cpu_state(self.model)}

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.model.load_state_dict(weights["model"])
        if version is not None:
            self.version = version


class DQNGraph(nn.Module):
    """``predict(obs)``: the argmax of the Q values (policy/graph.py)."""

    def __init__(self, policy: DQNPolicy):
        super().__init__()
        self.observation, self.model = ObservationInput(policy.obs_rms, policy.obs_view), policy.model

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.model(self.observation(obs)).argmax(-1)


def branch_argmax(q: torch.Tensor, branches: tuple[int, ...], mask: torch.Tensor | None = None) -> np.ndarray:
    """[n, B]: each branch's best option among those ``mask`` allows (None: all)."""
    q = D.mask_logits(q, mask)
    return torch.stack([part.argmax(-1) for part in q.split(branches, -1)], -1).cpu().numpy()


# ---------------------------------------------------------------- algorithm


class DQN(Algorithm):
    """``learn(batch)`` takes a replay minibatch (obs, action, reward, next_obs, terminated, discount,
    weight) and reports each row's |TD error| as its priority for prioritized replay (``pop_priorities``).
    As one of N data-parallel learners, ``batch`` is its own ``batch_size / N`` rows (``bind_learners``)."""

    data_parallel = True

    def __init__(self, cfg: DQNConfig, obs_space: gym.Space, act_space: gym.Space, num_envs: int):
        self.cfg = cfg
        self.policy = DQNPolicy(obs_space, act_space, cfg)
        if not self.policy.encoded:
            self.target = QNetwork(int(np.prod(obs_space.shape)), self.policy.n_actions, cfg, self.policy.branches)
            self.target.load_state_dict(self.policy.model.state_dict())
        else:  # the encoder too (one factory call per network trained)
            self.target = copy.deepcopy(self.policy.model)
        self.target.requires_grad_(False)
        self.optim = torch.optim.Adam(self.policy.model.parameters(), lr=cfg.lr, fused=True)
        self.updates = 0
        self.loss_step = CompiledLoss(self.td_loss, cfg, "dqn")  # compiled, bf16: cfg.compile, cfg.amp

    devices = ("cpu", "cuda")

    def to(self, device: torch.device) -> None:
        self.device = self.policy.device = device
        self.policy.model.to(device)  # (parameters move in place: the optimiser keeps them)
        self.target.to(device)
        self.loss_step.to(device)

    def learn(self, batch: Batch, progress: float = 0.0) -> dict[str, float]:
        cfg, model, view = self.cfg, self.policy.model, self.policy.obs_view
        device = self.device  # the batch moves to the learner's device once, as stored (CUDA: from pinned memory)
        obs = float_to_device(batch["obs"], device).reshape(len(batch["obs"]), *view)
        next_obs = float_to_device(batch["next_obs"], device).reshape(len(obs), *view)
        actions = host_to_device(batch["action"], device).long().reshape(len(obs), len(self.policy.branches))  # [n, B]
        next_mask = batch.get("next_action_mask")  # the max runs over the actions allowed at s'
        loss, q, target = self.loss_step(
            obs, next_obs, actions, float_to_device(batch["reward"], device),
            float_to_device(batch["discount"], device), float_to_device(batch["terminated"], device),
            float_to_device(batch["weight"], device) if "weight" in batch else None,  # prioritized replay's
            None if next_mask is None else host_to_device(next_mask, device))
        self.optim.zero_grad(set_to_none=True)
        loss.backward()
        # every learner's gradient and loss averaged (one all-reduce) before clipping; the loss read once from the
        # device, the same on every learner, so that all of them stop at a non-finite one
        terms = self.learners.average_gradients(model.parameters(), torch.stack([loss.detach(), q.detach().mean()]))
        td, q_mean = terms.cpu().tolist()
        if not np.isfinite(td):
            raise NonFiniteError(f"DQN loss became {td}: lower lr, or check the rewards for NaN")
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
        self.report_priorities((q.detach() - target).abs().mean(-1).cpu().numpy())  # |TD error| (branches: mean)
        self.policy.version += 1
        return {"loss/td": td, "q_mean": q_mean, "epsilon": self.policy.epsilon, "updates": 1.0}

    def bind_learners(self, learners: Collective) -> None:
        """One of ``learners.size`` learners, each learning from ``batch_size / learners`` rows of its own replay."""
        per_learner(self.cfg.batch_size, learners, "dqn.batch_size")
        self.loss_step.share(learners.size)
        super().bind_learners(learners)

    def td_loss(self, obs: torch.Tensor, next_obs: torch.Tensor, actions: torch.Tensor, reward: torch.Tensor,
                discount: torch.Tensor, terminated: torch.Tensor, weight: torch.Tensor | None,
                next_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The Huber TD loss, Q of the batch's actions [n, B] and their targets [n, 1]; what ``loss_step`` compiles
        (the networks in bf16 with amp, the loss in float32)."""
        cfg, model, branches = self.cfg, self.policy.model, self.policy.branches
        # ---- double-Q target: y = r + γ^m (1 - terminated) Q_target(s', argmax_a Q_online(s', a));
        # one online pass over [s; s'] serves both the prediction and the argmax (half the op overhead).
        # Branches (MultiDiscrete): Q of each branch's action [n, B], one target from the branches' mean.
        with self.loss_step.autocast():
            online = (model(torch.cat([obs, next_obs])) if cfg.double else model(obs)).float()
            with torch.no_grad():
                next_q = self.target(next_obs).float()
        if len(branches) == 1:
            q = online[:len(obs)].gather(-1, actions)
        else:
            q = torch.stack([part.gather(-1, actions[:, b:b + 1]).squeeze(-1)
                             for b, part in enumerate(online[:len(obs)].split(branches, -1))], -1)
        with torch.no_grad():
            if cfg.double:
                chooser = D.mask_logits(online[len(obs):], next_mask).split(branches, -1)
                values = [part.gather(-1, pick.argmax(-1, keepdim=True)).squeeze(-1)
                          for part, pick in zip(next_q.split(branches, -1), chooser)]
            else:
                values = [part.max(-1).values for part in D.mask_logits(next_q, next_mask).split(branches, -1)]
            next_value = values[0] if len(values) == 1 else torch.stack(values, -1).mean(-1)
            target = (reward + discount * (1.0 - terminated) * next_value)[:, None]
        if weight is not None:  # prioritized replay's importance weights
            return (weight[:, None] * F.smooth_l1_loss(q, target.expand_as(q), reduction="none")).mean(), q, target
        return F.smooth_l1_loss(q, target.expand_as(q)), q, target

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training, on the CPU wherever the learner is."""
        return cpu_tree({**self.policy.get_weights(), "target": self.target.state_dict(),
                         "optim": self.optim.state_dict(), "updates": self.updates, "version": self.policy.version,
                         "epsilon": self.policy.epsilon, "rng": self.policy.rng.bit_generator.state})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.set_weights(state, version=int(state["version"]))
        self.target.load_state_dict(state["target"])
        self.optim.load_state_dict(state["optim"])
        self.updates, self.policy.epsilon = int(state["updates"]), float(state["epsilon"])
        self.policy.rng.bit_generator.state = state["rng"]


register("dqn", DQNConfig, DQN, DQNPolicy, on_policy=False)
