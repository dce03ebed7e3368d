"""Action distributions as plain functions on tensors.

``torch.distributions`` objects cost ~100 µs each to build; per env step that dominates a small
policy's inference time on a CPU, so sampling and log-probabilities are computed directly here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_LOG_2PI = math.log(2 * math.pi)


def categorical_sample(logits: torch.Tensor) -> torch.Tensor:
    """Sample one index per row (Gumbel-max)."""
    u = torch.rand_like(logits).clamp_(1e-20, 1.0)
    return (logits - torch.log(-torch.log(u))).argmax(dim=-1)


def categorical_logp(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(logits, dim=-1).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def categorical_logp_entropy(logits: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``actions`` and entropy, sharing one log-softmax."""
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


def gaussian_logp(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    return (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1)
