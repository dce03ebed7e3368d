"""PPO's policy: ``PPOPolicy`` (collect / eval modes over one actor-critic model, observation statistics, hidden
states, weights) and the graphs it exports (``PPOGraph`` and its recurrent and hybrid kinds). The algorithm that
learns it is relayrl/algos/ppo.py, which re-exports these names; APPO, A2C and PQN build on them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from relayrl.algos.ppo_config import PPOConfig
from relayrl.core import Policy
from relayrl.data.dtypes import stored_dtype, to_stored, to_tensor
from relayrl.envs.hybrid import HybridLayout, hybrid_layout
from relayrl.envs.masks import branch_sizes
from relayrl.errors import ConfigError, EnvError
from relayrl.policy import distributions as D
from relayrl.policy.actor_critic import build_model, logp_entropy, sample_actions
from relayrl.policy.device import cpu_state
from relayrl.policy.encoders import check_space, make_encoder
from relayrl.policy.graph import ARGMAX, GraphOutput, ObservationInput, PolicyGraph
from relayrl.policy.normalizer import RunningMeanStd
from relayrl.policy.privileged import ActorKeys, check_keys, fill_hidden
from relayrl.types import Mode, PolicyOutput


class PPOPolicy(Policy):
    """``act(obs, mode)`` samples in "collect" mode and is deterministic in "eval" mode.

    A recurrent policy (``recurrent`` True) carries one hidden state per env and per mode, so an
    evaluation between two rollouts leaves the collected episodes' states alone. Whoever steps the
    envs calls ``reset_hidden(mode)`` after resetting them and ``reset_hidden(mode, done)`` after every
    step (an autoreset env's next observation is a new episode's first)::

        policy.reset_hidden("eval")
        while ...:
            result = venv.step(policy.act(obs, "eval").env_action)
            policy.reset_hidden("eval", result.done)
            obs = result.obs
    """

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: PPOConfig):
        key = f"{type(cfg).__name__.removesuffix('Config').lower()}.encoder"  # ppo.encoder, appo.encoder
        check_space(obs_space, key)
        # categorical branches: (n,) for Discrete(n), nvec for MultiDiscrete (one categorical head per branch), a
        # hybrid action's discrete part (relayrl/envs/hybrid.py: a Gaussian over its continuous part besides)
        self.branches = branch_sizes(act_space)
        self.hybrid = hybrid_layout(act_space)
        self.discrete = self.branches is not None and self.hybrid is None
        if self.branches is None and not isinstance(act_space, gym.spaces.Box):
            raise EnvError(f"PPO handles Discrete, MultiDiscrete (one axis of branches), hybrid (Tuple(Box, "
                           f"MultiDiscrete): relayrl/envs/hybrid.py) and Box action spaces, got {act_space}")
        if cfg.obs_norm and isinstance(obs_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            name = key.split(".")[0]
            raise ConfigError(f"{name}.obs_norm=true normalises observations, but {obs_space} observations are "
                              f"categories (one-hot encoded, already in [0, 1]): set {name}.obs_norm=false")
        self.cfg = cfg
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_shape = tuple(obs_space.shape)
        self.obs_dim = int(np.prod(obs_space.shape))
        self.multi = isinstance(act_space, gym.spaces.MultiDiscrete)  # actions [n, B], logits side by side
        if self.hybrid is not None:  # one float32 row [C + B]: the values, then the branch indices (envs/hybrid.py)
            box, multi = act_space.spaces
            self.act_dim = self.hybrid.continuous + sum(self.branches)  # the means, then the logits
            self.action_shape: tuple[int, ...] = (self.hybrid.width,)
            self.low, self.high = box.low.astype(np.float32), box.high.astype(np.float32)
            self.start = np.asarray(multi.start, dtype=np.int64)
        else:
            self.act_dim = sum(self.branches) if self.discrete else int(np.prod(act_space.shape))
            self.action_shape = tuple(act_space.shape)  # () for Discrete
        self.action_dtype = np.dtype(np.int64) if self.discrete else np.dtype(np.float32)
        if self.discrete:
            self.start = np.asarray(act_space.start, dtype=np.int64)  # env action = index + start
        elif self.hybrid is None:
            self.low = act_space.low.astype(np.float32)
            self.high = act_space.high.astype(np.float32)
        self.critic_only_keys = list(cfg.critic_only_keys)  # (privileged critic inputs: policy/privileged.py)
        if self.critic_only_keys:
            check_keys(self.critic_only_keys, obs_space, key.split(".")[0], encoder=cfg.encoder,
                       shared_trunk=cfg.shared_trunk, recurrent=cfg.recurrent)
        # the actor's encoder: yours (encoder), a built-in one for images and categories, or None (flat: the MLPs)
        actor_encoder = make_encoder(cfg.encoder, obs_space, act_space, key, normalized=cfg.obs_norm)
        # one trunk for both heads (null: wherever there is an encoder), else the critic has its own encoder
        self.shared_trunk = cfg.shared_trunk if cfg.shared_trunk is not None else actor_encoder is not None
        critic_encoder = None
        if self.critic_only_keys:  # the critic reads every key, the actor the others only
            self.shared_trunk, critic_encoder = False, actor_encoder
            actor = ActorKeys(obs_space, self.critic_only_keys, key)
            actor_encoder = (actor, actor.features)
        elif actor_encoder is not None and not self.shared_trunk:
            critic_encoder = make_encoder(cfg.encoder, obs_space, act_space, key, normalized=cfg.obs_norm)
        self.model = build_model(self.obs_dim, self.act_dim, self.discrete, cfg,
                                 None if actor_encoder is None else (actor_encoder, critic_encoder),
                                 shared=self.shared_trunk,
                                 gaussian=None if self.hybrid is None else self.hybrid.continuous)
        # what the network reads: flattened observations, or [n, *obs_shape] as an encoder takes them
        self.obs_view: tuple[int, ...] = (-1,) if actor_encoder is None else self.obs_shape
        self.recurrent = cfg.recurrent is not None
        self.state_size = self.model.state_size if self.recurrent else 0
        self._hidden: dict[str, torch.Tensor] = {}  # mode -> [n, state_size]
        self.obs_rms = RunningMeanStd(obs_space.shape) if cfg.obs_norm else None
        self._seen: RunningMeanStd | None = None  # a worker's raw observations since it last reported
        # the dtype of ``PolicyOutput.obs``, which rollouts store: normalised (float32) or as stored (data/dtypes.py)
        self.obs_dtype = np.dtype(np.float32) if cfg.obs_norm else stored_dtype(obs_space.dtype)
        self.update_norm = cfg.update_norm is not False  # (null: update, when there are statistics)
        self.version = 0

    def preprocess(self, obs: np.ndarray, update: bool, observe: bool = False) -> np.ndarray:
        """Observations as rollouts store them (``obs_dtype``); the network reads ``to_tensor`` of this."""
        if self.obs_rms is None:
            return to_stored(obs)
        if update:
            self.obs_rms.update(obs)
        elif observe and self._seen is not None:  # a worker: count what it saw for the learner
            self._seen.update(obs)
        return self.obs_rms.normalize(obs)

    masks_actions = True
    hybrid_actions = True

    def logp_entropy(self, out: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``actions`` and entropy from the actor's output, under the masked distribution
        (forbidden actions have probability 0) when ``mask`` is given; a sum over the branches of MultiDiscrete,
        and over the Gaussian and the branches of a hybrid action (whose mask covers its branches)."""
        if self.hybrid is not None:
            if actions.shape[-1] != self.hybrid.width:
                raise EnvError(f"hybrid actions of shape {tuple(actions.shape)} for {self.action_space}: each row "
                               f"has {self.hybrid.describe()}")
            out = D.mask_hybrid_logits(out, self.hybrid.continuous, mask)
            return D.hybrid_logp_entropy(out, self.model.log_std, self.branches, actions)
        if self.multi:
            return D.multi_categorical_logp_entropy(D.mask_logits(out, mask), self.branches, actions)
        return logp_entropy(D.mask_logits(out, mask) if self.discrete else out, actions, self.model.log_std)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, mode: Mode = "collect", action_mask: np.ndarray | None = None) -> PolicyOutput:
        collect = mode == "collect"
        x = self.preprocess(obs, update=collect and self.update_norm, observe=collect)
        xt = to_tensor(x, self.device).reshape(len(x), *self.obs_view)  # (the CPU: no copy)
        if self.recurrent:
            out, value, self._hidden[mode] = self.model(xt[:, None], self.hidden(mode, len(x)), critic=collect)
            out, value = out[:, 0], None if value is None else value[:, 0]
        elif collect:
            out, value = self.model.actor_critic(xt)
        else:
            out, value = self.model.actor(xt), None
        if self.hybrid is not None:
            return self._act_hybrid(x, out, value, collect, action_mask)
        if self.discrete and action_mask is not None:  # forbidden actions are never sampled nor chosen
            out = D.mask_logits(out, torch.from_numpy(action_mask).to(out.device))  # (checked where masks enter)
        action, logp = sample_actions(out, self.model.log_std, self.branches if self.multi else None, collect)
        action_np = action.cpu().numpy()
        if self.discrete:
            env_action = action_np + self.start if self.start.any() else action_np
        else:
            action_np = action_np.reshape(len(x), *self.action_shape)
            env_action = np.clip(action_np, self.low, self.high)
        return PolicyOutput(action=action_np, env_action=env_action, logp=None if logp is None else logp.cpu().numpy(),
                            value=None if value is None else value.cpu().numpy(), obs=x)

    def _act_hybrid(self, x: np.ndarray, out: torch.Tensor, value: torch.Tensor | None, collect: bool,
                    action_mask: np.ndarray | None) -> PolicyOutput:
        """``act``'s actions for a hybrid space: [n, C + B] float32 rows, the env's with the continuous part clipped
        to the bounds and the branch indices shifted by the space's start (relayrl/envs/hybrid.py)."""
        mask = None if action_mask is None else torch.from_numpy(action_mask).to(out.device)
        out = D.mask_hybrid_logits(out, self.hybrid.continuous, mask)  # forbidden options never sampled nor chosen
        action, logp = D.hybrid_sample(out, self.model.log_std, self.branches, collect)
        action_np = action.cpu().numpy()
        c = self.hybrid.continuous
        env_action = action_np.copy()
        env_action[:, :c] = np.clip(action_np[:, :c], self.low, self.high)
        env_action[:, c:] += self.start
        return PolicyOutput(action=action_np, env_action=env_action, logp=None if logp is None else logp.cpu().numpy(),
                            value=None if value is None else value.cpu().numpy(), obs=x)

    def check_observation(self, obs: Any) -> tuple[np.ndarray, bool]:
        """``Policy.check_observation``; a Dict observation may lack the critic's own keys (zeros then fill
        them: the actor never reads them)."""
        if self.critic_only_keys and isinstance(obs, dict):
            obs = fill_hidden(self.observation_space, obs, self.critic_only_keys)
        return super().check_observation(obs)

    @torch.inference_mode()
    def value(self, obs: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """V(obs). A recurrent policy continues the "collect" states of the envs ``rows`` ([n] bool;
        None: all) without advancing them: the value of a final or next observation."""
        x = self.preprocess(obs, update=False)
        xt = to_tensor(x, self.device).reshape(len(x), *self.obs_view)
        if not self.recurrent:
            return self.model.critic(xt).squeeze(-1).cpu().numpy()
        state = self._hidden.get("collect")
        if state is None:
            state = self.model.initial_state(len(x))
        elif rows is not None:
            state = state[torch.from_numpy(rows).to(state.device)]
        return self.model(xt[:, None], state)[1][:, 0].cpu().numpy()

    def predict(self, obs: Any, state: np.ndarray | None = None, deterministic: bool = True,
                action_mask: Any = None) -> Any:
        """Feed-forward: the action(s) for one observation or a batch. Recurrent: ``(actions, state)``, the state
        given explicitly ([n, state_size], or None at an episode's start) and returned for the next call.
        ``action_mask``: the allowed actions (True = allowed), one row or one per observation (or a Dict
        observation's ``action_mask`` entry, as ``Policy.predict``). Neither the observation statistics nor the
        collection and evaluation states change. A hybrid action (relayrl/envs/hybrid.py) is the tuple (continuous
        float32 [C], discrete int64 [B]), a sample of the Tuple space (with a batch: [n, C] and [n, B])."""
        if not self.recurrent and state is not None:
            raise ConfigError("this PPO policy is feed-forward: predict(obs) takes no state")
        batch, single, mask = self.check_inputs(obs, action_mask)
        mode: Mode = "eval" if deterministic else "collect"
        saved, update_norm, self.update_norm = self._hidden.get(mode), self.update_norm, False
        if self.recurrent:
            self._hidden[mode] = (self.model.initial_state(len(batch)) if state is None else torch.as_tensor(
                np.asarray(state, np.float32), device=self.device).reshape(len(batch), -1))
        try:
            out = self.act(batch, mode, action_mask=mask)
            new_state = self._hidden.get(mode)
        finally:
            self.update_norm = update_norm
            if saved is None:
                self._hidden.pop(mode, None)
            else:
                self._hidden[mode] = saved
        actions = out.env_action
        if self.hybrid is not None:
            actions = self.hybrid.split(actions)
            actions = tuple(part[0] for part in actions) if single else actions
        elif single:
            actions = actions[0]
        return (actions, new_state.cpu().numpy()) if self.recurrent else actions

    def observe_only(self) -> None:
        self.update_norm = False  # statistics belong to the learner; workers use the copy it publishes
        if self.obs_rms is not None:  # ... and count what they saw, for the learner to merge
            self._seen = RunningMeanStd(self.obs_rms.mean.shape)

    def pop_observation_moments(self) -> dict[str, np.ndarray] | None:
        if self._seen is None or self._seen.count == 0:
            return None
        moments, self._seen = self._seen.state_dict(), RunningMeanStd(self._seen.mean.shape)
        return moments

    def merge_observation_moments(self, moments: dict[str, np.ndarray]) -> None:
        if self.obs_rms is not None and self.update_norm:
            self.obs_rms.merge_state(moments)

    def hidden(self, mode: Mode, n: int) -> torch.Tensor:
        """The [n, state_size] state the next ``act(obs, mode)`` continues from (zeros for new envs)."""
        state = self._hidden.get(mode)
        if state is None or len(state) != n:
            state = self._hidden[mode] = self.model.initial_state(n)
        return state

    @torch.inference_mode()
    def reset_hidden(self, mode: Mode, done: np.ndarray | None = None) -> None:
        """New episodes begin: zero the state of the envs in ``done`` ([n] bool; None: every env)."""
        if done is None:
            self._hidden.pop(mode, None)
        elif mode in self._hidden:
            state = self._hidden[mode]
            self._hidden[mode] = state.masked_fill(torch.from_numpy(done).to(state.device)[:, None], 0.0)

    def set_hidden(self, mode: Mode, state: torch.Tensor) -> None:
        """The [n, state_size] state the next ``act(obs, mode)`` continues from (agent envs: agent_states.py)."""
        self._hidden[mode] = state.to(self.device, torch.float32)

    def export_graph(self) -> PolicyGraph:
        """``predict`` as one module for ``relayrl export``: the frozen normaliser, the network, then argmax or the
        clip to the bounds; a recurrent policy's takes and returns its state."""
        if self.hybrid is not None:
            graph = RecurrentHybridPPOGraph(self) if self.recurrent else HybridPPOGraph(self)
            return PolicyGraph(graph, "the Gaussian means clipped to the bounds; argmax of each branch's logits",
                               outputs=hybrid_outputs(self.hybrid), unread=tuple(self.critic_only_keys))
        graph = RecurrentPPOGraph(self) if self.recurrent else PPOGraph(self)
        return PolicyGraph(graph, ARGMAX if self.discrete else "clip to the action bounds",
                           unread=tuple(self.critic_only_keys))

    def to(self, device: torch.device) -> None:
        """Act and learn on ``device`` (the learner's; rollout workers' policies stay on the CPU)."""
        self.device = device
        self.model.to(device)
        self._hidden = {mode: state.to(device) for mode, state in self._hidden.items()}

    def get_weights(self) -> dict[str, Any]:
        """Model parameters (on the CPU, wherever the model is) plus observation statistics (everything `act`
        depends on)."""
        state: dict[str, Any] = {"model": cpu_state(self.model)}
        if self.obs_rms is not None:
            state["obs_rms"] = self.obs_rms.state_dict()
        return state

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.model.load_state_dict(weights["model"])
        if self.obs_rms is not None and "obs_rms" in weights:
            self.obs_rms.load_state_dict(weights["obs_rms"])
        if version is not None:
            self.version = version


class PPOGraph(nn.Module):
    """``predict(obs)`` of a feed-forward PPO (or APPO) policy: argmax of the logits, or the Gaussian mean clipped
    to the bounds (policy/graph.py)."""

    def __init__(self, policy: PPOPolicy):
        super().__init__()
        self.observation, self.model = ObservationInput(policy.obs_rms, policy.obs_view), policy.model
        self.discrete, self.shape = policy.discrete, tuple(policy.action_shape)
        if not policy.discrete:
            self.register_buffer("low", torch.tensor(policy.low))
            self.register_buffer("high", torch.tensor(policy.high))

    def act(self, out: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return out.argmax(-1)
        return torch.minimum(torch.maximum(out.reshape((out.shape[0],) + self.shape), self.low), self.high)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.act(self.model.actor(self.observation(obs)))


class RecurrentPPOGraph(PPOGraph):
    """``predict(obs, state)``: one step of the recurrent network from an explicit state, the next state out."""

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, _, state = self.model(self.observation(obs)[:, None], state, critic=False)
        return self.act(out[:, 0]), state


class HybridPPOGraph(nn.Module):
    """``predict(obs)`` of a feed-forward policy with hybrid actions: two outputs, the Gaussian means clipped to the
    bounds (float32 [n, C]) and each branch's argmax plus the space's start (int64 [n, B])."""

    def __init__(self, policy: PPOPolicy):
        super().__init__()
        self.observation, self.model = ObservationInput(policy.obs_rms, policy.obs_view), policy.model
        self.continuous, self.branches = policy.hybrid.continuous, policy.branches
        self.register_buffer("low", torch.tensor(policy.low))
        self.register_buffer("high", torch.tensor(policy.high))
        self.register_buffer("start", torch.tensor(policy.start))

    def act(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, logits = D.hybrid_split(out, self.continuous)
        return (torch.minimum(torch.maximum(mean, self.low), self.high),
                D.multi_categorical_mode(logits, self.branches) + self.start)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.act(self.model.actor(self.observation(obs)))


class RecurrentHybridPPOGraph(HybridPPOGraph):
    """``predict(obs, state)`` with hybrid actions: (continuous, discrete, next_state)."""

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, _, state = self.model(self.observation(obs)[:, None], state, critic=False)
        return (*self.act(out[:, 0]), state)


def hybrid_outputs(layout: HybridLayout) -> tuple[GraphOutput, ...]:
    """The exported graph's action outputs for a hybrid action (``HybridPPOGraph``)."""
    return (GraphOutput("continuous_action", "float32", (layout.continuous,)),
            GraphOutput("discrete_action", "int64", (len(layout.branches),)))
