"""Pick an env manager for this machine: subprocess workers only when they pay for their overhead."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any


from relayrl.envs.checks import reset_result, step_error, wrapper_unpack_error
from relayrl.envs.masks import MASK_KEY, sample_allowed, with_masks
from relayrl.envs.registry import make

# Parent-side cost of one subprocess round trip (write, wake, poll, copy), measured on the project's
# 2-vCPU machine at ~100-300 µs per vector step; below that saving, sync is faster.
SUBPROC_OVERHEAD_S = 300e-6


def measure_step_cost(env_id: str, kwargs: dict[str, Any] | None = None, steps: int = 100) -> float:
    """Seconds per ``env.step`` with random actions: the lower quartile, not the mean (or even the median),
    so that other jobs preempting this process on a busy machine cannot make a cheap env look expensive
    (measured: on the 2 shared cores the median of 50 CartPole steps once read 19 µs, twice the usual 10,
    and auto picked subproc, then at 0.56x the sync manager)."""
    env = with_masks(make(env_id, **(kwargs or {})))
    try:
        _, info = _reset(env, 0)
        env.action_space.seed(0)
        times = []
        for _ in range(steps):
            action = sample_allowed(env.action_space, info.get(MASK_KEY))  # (an env's mask is binding)
            start = time.perf_counter()
            try:
                result = env.step(action)
            except ValueError as exc:  # (the env's own faults are the env managers' to handle)
                raise wrapper_unpack_error(env, 0, "step", exc) or exc
            times.append(time.perf_counter() - start)
            try:
                _, _, terminated, truncated, info = result
            except (TypeError, ValueError):
                raise step_error(env, 0, result) from None
            if terminated or truncated:
                _, info = _reset(env, None)
        return statistics.quantiles(times, n=4)[0]
    finally:
        env.close()


def _reset(env, seed: int | None):
    try:
        return reset_result(env, 0, env.reset(seed=seed))
    except ValueError as exc:
        raise wrapper_unpack_error(env, 0, "reset", exc) or exc


def choose_manager(env_id: str, num_envs: int, kwargs: dict[str, Any] | None = None,
                   workers: int | None = None) -> tuple[str, int]:
    """("sync", 1) or ("subproc", workers): subproc when the step time it saves exceeds its overhead."""
    cores = os.cpu_count() or 1
    workers = min(workers or cores, num_envs)
    if workers < 2:
        return "sync", 1
    cost = measure_step_cost(env_id, kwargs)
    saved = cost * num_envs * (1.0 - 1.0 / workers)
    return ("subproc", workers) if saved > SUBPROC_OVERHEAD_S else ("sync", 1)
