"""Pick the number of torch threads for the learner by timing (roadrunner's backprop_workers=-1).

Small MLPs train fastest on one thread; wide networks and big batches gain from more, and a
recurrent layer (seq_len small products one after another) gains less than an MLP of the same
width. Rather than guess, ``time_threads`` times a few passes of a gradient step for 1, 2, 4, ...
threads (up to the cores) and returns the fastest. ``resolve_threads`` times the algorithm's own
update when it offers one (``timing_step``: PPO's, recurrent or not); ``pick_threads`` times an MLP
of the algorithm's size on synthetic data, for algorithms that are such MLPs.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any, Callable

import gymnasium as gym
import torch
from torch import nn

from relayrl.options import RunConfig
from relayrl.policy.encoders import holds_nature_image
from relayrl.policy.networks import mlp


def time_threads(step: Callable[[], Any], passes: int = 5, max_threads: int | None = None
                 ) -> tuple[int, dict[int, float]]:
    """(the fastest thread count, median seconds per ``step()`` for each count tried)."""
    cores = max_threads or os.cpu_count() or 1
    candidates = [k for k in (1, 2, 4, 8, 16, 32) if k <= cores] or [1]
    before = torch.get_num_threads()
    timings: dict[int, float] = {}
    try:
        for k in candidates:
            torch.set_num_threads(k)
            samples = []
            for i in range(passes + 1):
                start = time.perf_counter()
                step()
                if i:  # the first pass warms up
                    samples.append(time.perf_counter() - start)
            timings[k] = statistics.median(samples)
    finally:
        torch.set_num_threads(before)
    return min(timings, key=timings.get), timings


def pick_threads(hidden: list[int], batch_size: int, obs_dim: int = 64, passes: int = 5,
                 max_threads: int | None = None) -> tuple[int, dict[int, float]]:
    """``time_threads`` on an actor-and-critic pair of MLPs of ``hidden`` sizes."""
    torch.manual_seed(0)
    model = nn.ModuleList([mlp(obs_dim, hidden, 1), mlp(obs_dim, hidden, 1)])  # actor-and-critic sized
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = torch.randn(batch_size, obs_dim), torch.randn(batch_size, 1)

    def step() -> None:
        loss = sum(((net(x) - y) ** 2).mean() for net in model)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
    return time_threads(step, passes, max_threads)


IMAGE_THREADS = 4  # at most, for a CNN learner: one per core up to this


def default_threads(space: gym.Space) -> int:
    """``threads: null``: one per core (up to ``IMAGE_THREADS``) when the observations hold an image the Nature CNN
    reads (measured on 2 cores: PPO on Pong 1.5x), else 1: for vectors (small MLPs) and for small images such as
    MinAtar's 10x10 planes (the small CNN). Their ops are too small for a second thread to pay reliably: PPO on
    MinAtar Breakout ran 1.35x faster with 2 threads on an idle 2-core machine but 8-45x slower with other
    processes on its cores (each op waits for a descheduled thread; benchmarks/minatar_speed.py), and a
    learner's envs or other jobs often are."""
    return min(os.cpu_count() or 1, IMAGE_THREADS) if holds_nature_image(space) else 1


def resolve_threads(config: RunConfig, algo: Any) -> RunConfig:
    """threads=-1: time ``algo``'s own gradient step (else an MLP of its size) and keep the fastest count.

    The global torch random state is restored, so a run picks the same actions and minibatches
    whichever count wins (the timing itself works on copies and synthetic data).
    """
    if config.threads != -1:
        return config
    rng = torch.get_rng_state()
    try:
        step = algo.timing_step()
        if step is not None:
            best, timings = time_threads(step)
        else:
            best, timings = pick_threads(*config.algo_config.timing_sizes())
    finally:
        torch.set_rng_state(rng)
    shown = ", ".join(f"{k}: {t * 1e3:.2f} ms" for k, t in timings.items())
    print(f"relayrl: threads=-1 picked {best} torch thread{'s' * (best > 1)} (per update pass: {shown})",
          file=sys.stderr)
    return config.model_copy(update={"threads": best})
