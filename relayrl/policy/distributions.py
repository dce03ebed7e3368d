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


# ---- action masks and several categorical branches (MultiDiscrete actions)
MASKED_LOGIT = -1e8  # a forbidden action's logit: exp() is exactly 0 in float32, and 0 * logit stays finite
# (-inf would make the entropy's p * log p a NaN, and finfo.min overflows to -inf once a logit is subtracted)


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with the actions ``mask`` forbids (False) set to ``MASKED_LOGIT`` (None: unchanged)."""
    return logits if mask is None else logits.masked_fill(~mask, MASKED_LOGIT)


def multi_categorical_sample(logits: torch.Tensor, branches: tuple[int, ...]) -> torch.Tensor:
    """[n, B]: one index per branch, ``logits`` holding the branches' logits side by side."""
    return torch.stack([categorical_sample(part) for part in logits.split(branches, dim=-1)], dim=-1)


def multi_categorical_mode(logits: torch.Tensor, branches: tuple[int, ...]) -> torch.Tensor:
    """[n, B]: the most likely index of each branch."""
    return torch.stack([part.argmax(-1) for part in logits.split(branches, dim=-1)], dim=-1)


def multi_categorical_logp_entropy(logits: torch.Tensor, branches: tuple[int, ...], actions: torch.Tensor
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``actions`` ([n, B]) and entropy of independent branches: sums over the branches."""
    logp = entropy = None
    for b, part in enumerate(logits.split(branches, dim=-1)):
        lp, ent = categorical_logp_entropy(part, actions[..., b])
        logp, entropy = (lp, ent) if logp is None else (logp + lp, entropy + ent)
    return logp, entropy
