"""PPO's networks: the actor-critic a PPO (or APPO) policy learns with.

- ``ActorCritic``: separate actor and critic MLPs on flattened observations.
- ``EncodedActorCritic``: the same MLP heads on encoders (yours, ``<algo>.encoder``, or a built-in CNN, one-hot or
  Dict encoder: policy/encoders.py), one shared by both heads (``shared_trunk``, the default) or one each.
- ``RecurrentActorCritic`` (policy/recurrent.py): LSTM or GRU layers under the heads.

``build_model`` picks one from the config; ``sample_actions`` and ``logp_entropy`` read the actor's output as a
distribution (categorical logits, one block per MultiDiscrete branch, or Gaussian means with the log std; a hybrid
action's means then logits: policy/distributions.py).
Every model has ``actor_parameters()`` and ``critic_parameters()``, one optimiser each.
"""

from __future__ import annotations

from typing import Literal, Protocol

import torch
from torch import nn

from relayrl.policy import distributions as D
from relayrl.policy.networks import mlp
from relayrl.policy.recurrent import RecurrentActorCritic

class NetworkConfig(Protocol):
    """What the networks read of a PPO (or APPO) config (algos/ppo.py's PPOConfig, which imports this module)."""

    hidden_sizes: list[int]
    activation: str
    log_std_init: float
    recurrent: Literal["lstm", "gru"] | None
    recurrent_hidden: int


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs; a state-independent log std for continuous actions."""

    def __init__(self, obs_dim: int, act_dim: int, discrete: bool, cfg: NetworkConfig, gaussian: int | None = None):
        super().__init__()
        self.discrete = discrete
        self.actor = mlp(obs_dim, cfg.hidden_sizes, act_dim, cfg.activation, out_gain=0.01)
        self.critic = mlp(obs_dim, cfg.hidden_sizes, 1, cfg.activation, out_gain=1.0)
        self.log_std = log_std_parameter(act_dim, discrete, gaussian, cfg.log_std_init)

    def actor_parameters(self) -> list[nn.Parameter]:
        return [*self.actor.parameters(), *([self.log_std] if self.log_std is not None else [])]

    def critic_parameters(self) -> list[nn.Parameter]:
        return list(self.critic.parameters())

    def actor_critic(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's output and the value [n] of each observation."""
        return self.actor(obs), self.critic(obs).squeeze(-1)

    def logp_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return logp_entropy(self.actor(obs), actions, self.log_std)


def log_std_parameter(act_dim: int, discrete: bool, gaussian: int | None, init: float) -> nn.Parameter | None:
    """The state-independent log std of the Gaussian columns: all ``act_dim`` of a continuous action, none of a
    discrete one, the first ``gaussian`` of a hybrid one (means, then the branches' logits)."""
    width = gaussian if gaussian is not None else (0 if discrete else act_dim)
    return nn.Parameter(torch.full((width,), init)) if width else None


def logp_entropy(out: torch.Tensor, actions: torch.Tensor, log_std: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``actions`` and entropy, from the actor's output (logits, or Gaussian means)."""
    if log_std is None:
        return D.categorical_logp_entropy(out, actions)
    log_std = log_std.expand_as(out)
    return D.gaussian_logp(out, log_std, actions), D.gaussian_entropy(log_std)


def sample_actions(out: torch.Tensor, log_std: torch.Tensor | None, branches: tuple[int, ...] | None, sample: bool
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Actions from the actor's output and their log-probability: drawn when ``sample``, else the most likely ones
    (no log-probability). Categorical logits when ``log_std`` is None (``branches``: a MultiDiscrete action's,
    side by side, actions [n, B]), else Gaussian means."""
    if log_std is not None:
        action = out + log_std.exp() * torch.randn_like(out) if sample else out
        return action, D.gaussian_logp(out, log_std.expand_as(out), action) if sample else None
    if branches is not None:
        action = D.multi_categorical_sample(out, branches) if sample else D.multi_categorical_mode(out, branches)
        return action, D.multi_categorical_logp_entropy(out, branches, action)[0] if sample else None
    action = D.categorical_sample(out) if sample else out.argmax(-1)
    return action, D.categorical_logp(out, action) if sample else None


class EncodedActorCritic(nn.Module):
    """PPO's heads on encoders (yours, ``encoder``, or a built-in one), with an MLP head of ``hidden_sizes`` each on
    the features. ``critic_encoder`` None: one encoder feeds both heads (``shared_trunk``, the default with an
    encoder, as SB3's CnnPolicy and CleanRL's Atari PPO: a CNN runs once per observation), trained by the actor's
    optimiser with the value loss's gradient too; else the critic has its own. ``actor(obs)``, ``critic(obs)`` and
    ``actor_critic(obs)`` are called as ActorCritic's are."""

    def __init__(self, actor_encoder: nn.Module, actor_features: int, critic_encoder: nn.Module | None,
                 critic_features: int, act_dim: int, discrete: bool, cfg: NetworkConfig, gaussian: int | None = None):
        super().__init__()
        self.discrete = discrete
        self.actor_encoder, self.critic_encoder = actor_encoder, critic_encoder  # (None: no keys in the state)
        self.shared = critic_encoder is None
        self.actor_head = mlp(actor_features, cfg.hidden_sizes, act_dim, cfg.activation, out_gain=0.01)
        self.critic_head = mlp(actor_features if self.shared else critic_features, cfg.hidden_sizes, 1,
                               cfg.activation, out_gain=1.0)
        self.log_std = log_std_parameter(act_dim, discrete, gaussian, cfg.log_std_init)

    def actor(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor_head(self.actor_encoder(obs))

    def critic(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic_head((self.actor_encoder if self.shared else self.critic_encoder)(obs))

    def actor_critic(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's output and the value [n] of each observation (a shared encoder runs once)."""
        if not self.shared:
            return self.actor(obs), self.critic(obs).squeeze(-1)
        features = self.actor_encoder(obs)
        return self.actor_head(features), self.critic_head(features).squeeze(-1)

    def actor_parameters(self) -> list[nn.Parameter]:
        extra = [self.log_std] if self.log_std is not None else []
        return [*self.actor_encoder.parameters(), *self.actor_head.parameters(), *extra]

    def critic_parameters(self) -> list[nn.Parameter]:
        encoder = [] if self.shared else [*self.critic_encoder.parameters()]
        return [*encoder, *self.critic_head.parameters()]

    def logp_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return logp_entropy(self.actor(obs), actions, self.log_std)


def build_model(obs_dim: int, act_dim: int, discrete: bool, cfg: NetworkConfig,
                encoders: tuple[tuple[nn.Module, int], tuple[nn.Module, int] | None] | None = None,
                shared: bool = False, gaussian: int | None = None) -> nn.Module:
    """The model ``cfg`` asks for. ``encoders``: (actor encoder, its F) and (critic encoder, its F), or None with
    a shared trunk (``obs_dim`` is then unused); None: the MLPs read flattened observations. ``shared``: one trunk
    (the encoder, and a recurrent policy's recurrent layer) feeds both heads. ``gaussian``: a hybrid action's
    continuous width C (the actor's first C outputs are Gaussian means with a log std, the rest logits)."""
    if cfg.recurrent is None:
        if encoders is None:
            return ActorCritic(obs_dim, act_dim, discrete, cfg, gaussian)
        critic = (None, 0) if encoders[1] is None else encoders[1]
        return EncodedActorCritic(*encoders[0], *critic, act_dim, discrete, cfg, gaussian)
    if encoders is not None:
        obs_dim = encoders[0][1]
    return RecurrentActorCritic(obs_dim, act_dim, discrete, cfg.recurrent, cfg.recurrent_hidden, shared,
                                cfg.hidden_sizes, cfg.activation, cfg.log_std_init, encoders=encoders,
                                gaussian=gaussian)
