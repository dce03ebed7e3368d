"""Pick the number of torch threads for the learner by timing (roadrunner's backprop_workers=-1).

Small MLPs train fastest on one thread; wide networks and big batches gain from more. Rather than
guess, ``pick_threads`` times a few optimisation passes of an MLP of the algorithm's size on
synthetic data for 1, 2, 4, ... threads (up to the cores) and returns the fastest.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
from torch import nn

from relayrl.policy.networks import mlp


def pick_threads(hidden: list[int], batch_size: int, obs_dim: int = 64, passes: int = 5,
                 max_threads: int | None = None) -> tuple[int, dict[int, float]]:
    """(the fastest thread count, median seconds per pass for each count tried)."""
    cores = max_threads or os.cpu_count() or 1
    candidates = [k for k in (1, 2, 4, 8, 16, 32) if k <= cores] or [1]
    before = torch.get_num_threads()
    torch.manual_seed(0)
    model = nn.ModuleList([mlp(obs_dim, hidden, 1), mlp(obs_dim, hidden, 1)])  # actor-and-critic sized
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = torch.randn(batch_size, obs_dim), torch.randn(batch_size, 1)
    timings: dict[int, float] = {}
    try:
        for k in candidates:
            torch.set_num_threads(k)
            samples = []
            for i in range(passes + 1):
                start = time.perf_counter()
                loss = sum(((net(x) - y) ** 2).mean() for net in model)
                optim.zero_grad(set_to_none=True)
                loss.backward()
                optim.step()
                if i:  # the first pass warms up
                    samples.append(time.perf_counter() - start)
            timings[k] = statistics.median(samples)
    finally:
        torch.set_num_threads(before)
    return min(timings, key=timings.get), timings
