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


# ---- hybrid actions (relayrl/envs/hybrid.py): a Gaussian over C continuous values times independent categorical
# branches. The actor's output is [n, C + sum(branches)] (the means, then the branches' logits side by side); an
# action is one float32 row [n, C + B] (the values, then the branch indices as floats). The two parts are
# independent, so the log-probability and the entropy are sums of the parts'.
def hybrid_split(out: torch.Tensor, continuous: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The actor's output as (means [n, C], logits [n, sum(branches)])."""
    return out[..., :continuous], out[..., continuous:]


def mask_hybrid_logits(out: torch.Tensor, continuous: int, mask: torch.Tensor | None) -> torch.Tensor:
    """``out`` with the forbidden options of the discrete part masked (``mask_logits``); the means unchanged."""
    if mask is None:
        return out
    mean, logits = hybrid_split(out, continuous)
    return torch.cat([mean, mask_logits(logits, mask)], dim=-1)


def hybrid_sample(out: torch.Tensor, log_std: torch.Tensor, branches: tuple[int, ...], sample: bool
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[n, C + B] actions: drawn, with their log-probability, when ``sample``; else the means and each branch's most
    likely index (no log-probability). ``log_std`` [C] gives C."""
    mean, logits = hybrid_split(out, log_std.shape[-1])
    if not sample:
        return torch.cat([mean, multi_categorical_mode(logits, branches).to(mean.dtype)], dim=-1), None
    values = mean + log_std.exp() * torch.randn_like(mean)
    indices = multi_categorical_sample(logits, branches)
    logp = gaussian_logp(mean, log_std.expand_as(mean), values) + \
        multi_categorical_logp_entropy(logits, branches, indices)[0]
    return torch.cat([values, indices.to(mean.dtype)], dim=-1), logp


def hybrid_logp_entropy(out: torch.Tensor, log_std: torch.Tensor, branches: tuple[int, ...], actions: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``actions`` ([n, C + B]) and entropy: the Gaussian's plus the branches'."""
    continuous = log_std.shape[-1]
    mean, logits = hybrid_split(out, continuous)
    log_std = log_std.expand_as(mean)
    logp_d, entropy_d = multi_categorical_logp_entropy(logits, branches, actions[..., continuous:])
    return (gaussian_logp(mean, log_std, actions[..., :continuous]) + logp_d,
            gaussian_entropy(log_std) + entropy_d)
