"""Network builders."""

from __future__ import annotations

import math

from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def mlp(in_dim: int, hidden: list[int], out_dim: int, activation: str = "tanh",
        out_gain: float = 1.0, layer_norm: bool = False) -> nn.Sequential:
    """An MLP with orthogonal initialisation (gain sqrt(2) inside, ``out_gain`` on the last layer); ``layer_norm``:
    a LayerNorm after each hidden linear layer, before its activation (PQN's Q network)."""
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden]
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [_init(nn.Linear(a, b), math.sqrt(2)), *([nn.LayerNorm(b)] if layer_norm else []),
                   ACTIVATIONS[activation]()]
    layers.append(_init(nn.Linear(sizes[-1], out_dim), out_gain))
    return nn.Sequential(*layers)


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
