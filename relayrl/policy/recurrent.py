"""Recurrent actor-critic (LSTM or GRU) whose hidden state is one flat [n, state_size] array.

The actor and the critic each run their own recurrent layer over the observations, or share one
(``shared_trunk``); MLP heads turn the layer's output into the action distribution's parameters
and the value. Everything the network remembers between steps is one float32 row per env (h, and c
for an LSTM, of each layer, side by side), so a rollout stores it like any other per-step array and
a sequence minibatch starts from the row stored at each sequence's first step::

    model = RecurrentActorCritic(obs_dim, act_dim, discrete, kind="gru", hidden=64)
    state = model.initial_state(num_envs)
    out, value, state = model(obs[:, None], state)         # one step for every env: [n, 1, ...]
    out, value, _ = model(obs_seq, state0)                 # [B, L, ...] sequences from stored states

With ``encoders`` (an encoder and its feature width F for the actor's layer, and one for the critic's
or None with ``shared_trunk``: policy/encoders.py), observations keep their shape, [B, L, *obs_shape];
every step is encoded to [B, L, F] before the recurrent layers, which then take F inputs (``obs_dim``
is then F).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from relayrl.policy.networks import mlp


class RecurrentActorCritic(nn.Module):
    """Args:
        kind: "lstm" or "gru".
        hidden: units of each recurrent layer.
        shared_trunk: one recurrent layer feeds both heads; otherwise the actor and the critic
            have one each.
        head_sizes, activation: hidden layers of the MLP heads on top of the recurrent layer.
        encoders: (actor encoder, its F) and (critic encoder, its F) or None with ``shared_trunk``
            (module docstring); None: the layers read the flattened observations.
        gaussian: the Gaussian columns of a hybrid action (the first C outputs; None: all of a continuous
            action's, none of a discrete one's).
    """

    def __init__(self, obs_dim: int, act_dim: int, discrete: bool, kind: Literal["lstm", "gru"], hidden: int,
                 shared_trunk: bool = False, head_sizes: list[int] | None = None, activation: str = "tanh",
                 log_std_init: float = 0.0,
                 encoders: tuple[tuple[nn.Module, int], tuple[nn.Module, int] | None] | None = None,
                 gaussian: int | None = None):
        super().__init__()
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.discrete, self.lstm, self.hidden = discrete, kind == "lstm", hidden
        critic_dim = obs_dim
        if encoders is not None:  # registered only when given: the flat network's parameter names stay as they were
            (self.actor_encoder, obs_dim), critic = encoders
            if critic is not None and not shared_trunk:
                self.critic_encoder, critic_dim = critic
            else:
                self.critic_encoder, critic_dim = None, obs_dim
        self.encoded = encoders is not None
        self.actor_rnn = _init(rnn(obs_dim, hidden, batch_first=True))
        self.critic_rnn = None if shared_trunk else _init(rnn(critic_dim, hidden, batch_first=True))
        self.actor_head = mlp(hidden, head_sizes or [], act_dim, activation, out_gain=0.01)
        self.critic_head = mlp(hidden, head_sizes or [], 1, activation, out_gain=1.0)
        width = gaussian if gaussian is not None else (0 if discrete else act_dim)  # (actor_critic.log_std_parameter)
        self.log_std = nn.Parameter(torch.full((width,), log_std_init)) if width else None
        self.layer_size = hidden * (2 if self.lstm else 1)  # state columns of one recurrent layer
        self.state_size = self.layer_size * (1 if shared_trunk else 2)

    def actor_parameters(self) -> list[nn.Parameter]:
        """Trained by the actor's optimiser: the actor's layer (the shared trunk), head and log std."""
        extra = [self.log_std] if self.log_std is not None else []
        encoder = [*self.actor_encoder.parameters()] if self.encoded else []
        return [*encoder, *self.actor_rnn.parameters(), *self.actor_head.parameters(), *extra]

    def critic_parameters(self) -> list[nn.Parameter]:
        rnn = [*self.critic_rnn.parameters()] if self.critic_rnn is not None else []
        encoder = [*self.critic_encoder.parameters()] if self.encoded and self.critic_encoder is not None else []
        return [*encoder, *rnn, *self.critic_head.parameters()]

    def initial_state(self, n: int) -> torch.Tensor:
        """The state at an episode's start: zeros, on the device the layers are on."""
        return torch.zeros(n, self.state_size, device=self.actor_rnn.weight_hh_l0.device)

    def forward(self, obs: torch.Tensor, state: torch.Tensor, critic: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Run [B, L, obs_dim] sequences ([B, L, *obs_shape] with encoders) from the [B, state_size] states
        before their first steps.

        Returns the actor's output [B, L, act_dim] (logits or Gaussian means), the values [B, L]
        (None when ``critic`` is False) and the state after the last step. Outputs at step t depend
        on steps up to t only, so padding after a sequence's end cannot change them.
        """
        actor_state, critic_state = state[:, :self.layer_size], state[:, self.layer_size:]
        raw = obs
        if self.encoded:
            obs = _encode(self.actor_encoder, raw)
        features, actor_state = self._run(self.actor_rnn, obs, actor_state)
        value = None
        if critic:
            if self.critic_rnn is not None:
                encoder = self.critic_encoder if self.encoded else None
                critic_obs = obs if encoder is None else _encode(encoder, raw)
                critic_features, critic_state = self._run(self.critic_rnn, critic_obs, critic_state)
            else:
                critic_features = features
            value = self.critic_head(critic_features).squeeze(-1)
        return self.actor_head(features), value, torch.cat([actor_state, critic_state], dim=-1)

    def _run(self, rnn: nn.Module, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if obs.shape[1] == 1:  # one step (acting): the cell function on the layer's weights is 3-4x faster
            weights = (rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0)
            if self.lstm:
                h, c = torch.lstm_cell(obs[:, 0], tuple(state.split(self.hidden, dim=-1)), *weights)
                return h[:, None], torch.cat([h, c], dim=-1)
            h = torch.gru_cell(obs[:, 0], state, *weights)
            return h[:, None], h
        if self.lstm:
            h, c = state.split(self.hidden, dim=-1)
            out, (h, c) = rnn(obs, (h[None].contiguous(), c[None].contiguous()))
            return out, torch.cat([h[0], c[0]], dim=-1)
        out, h = rnn(obs, state[None].contiguous())
        return out, h[0]


def _encode(encoder: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """[B, L, *obs_shape] -> the encoder's features of every step, [B, L, F]."""
    b, length = obs.shape[:2]
    return encoder(obs.reshape(b * length, *obs.shape[2:])).reshape(b, length, -1)


def _init(rnn: nn.Module) -> nn.Module:
    """Orthogonal weights and zero biases, as the MLPs (networks.py)."""
    for name, param in rnn.named_parameters():
        if "weight" in name:
            nn.init.orthogonal_(param)
        else:
            nn.init.zeros_(param)
    return rnn
