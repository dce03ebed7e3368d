"""An on-policy rollout's minibatches, as tensors on the learner's device: shuffled steps (feed-forward
policies) or padded sequences (recurrent ones, data/sequences.py).

Both take ``steps``, a dict of [T, N, ...] tensors already on the learner's device (the rollout moves there
once per update), and return ``epoch``, a function that yields one pass of minibatches, drawn afresh on each
call::

    epoch = step_minibatches(steps, batch_size=256)
    for _ in range(epochs):
        for mb in epoch():                    # {key: [batch_size, ...]}
            ...
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch

from relayrl.data.sequences import chunk, minibatches, pad, split_trajectories

Epoch = Callable[[], Iterator[dict[str, torch.Tensor]]]


def step_minibatches(steps: dict[str, torch.Tensor], batch_size: int) -> Epoch:
    """Shuffled steps, ``batch_size`` each (at most the rollout), the remainder left out; the permutation is drawn
    on the steps' device."""
    T, N = next(iter(steps.values())).shape[:2]
    n = T * N
    flat = {key: value.reshape(n, *value.shape[2:]) for key, value in steps.items()}
    size, device = min(batch_size, n), next(iter(flat.values())).device

    def epoch() -> Iterator[dict[str, torch.Tensor]]:
        perm = torch.randperm(n, device=device)
        for start in range(0, n - size + 1, size):
            idx = perm[start:start + size]
            yield {key: value[idx] for key, value in flat.items()}
    return epoch


def sequence_minibatches(steps: dict[str, torch.Tensor], hidden: torch.Tensor, done: np.ndarray, seq_len: int,
                         batch_trajectories: int) -> Epoch:
    """Trajectories (cut after each ``done`` step and into ``seq_len`` chunks; 0: uncut), ``batch_trajectories`` at
    a time, padded.

    "obs" is [B, L, ...] with padding, "hidden" [B, state_size] the state stored (``hidden``, [T, N, state_size])
    at each sequence's first step, "mask" [B, L] marks the real steps; every other key holds the real steps only,
    in the order ``out[mask]`` lists them. The sequences are chosen on the CPU (numpy bookkeeping), then their
    indices move to ``hidden``'s device.
    """
    segments = chunk(split_trajectories(done), seq_len)
    device = hidden.device

    def epoch() -> Iterator[dict[str, torch.Tensor]]:
        for selection in minibatches(torch.randperm(len(segments)).numpy(), batch_trajectories):
            t, col, mask = (torch.from_numpy(a).to(device) for a in pad(segments, selection))
            first = (torch.from_numpy(a[selection]).to(device) for a in (segments.start, segments.column))
            mb = {key: value[t, col][mask] for key, value in steps.items() if key != "obs"}
            mb.update(obs=steps["obs"][t, col], mask=mask, hidden=hidden[tuple(first)])
            yield mb
    return epoch
