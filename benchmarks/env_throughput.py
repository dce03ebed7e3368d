"""Env steps per second of relayrl's vector env managers against Gymnasium's.

CartPole-v1 with random actions, for num_envs 8 and 32: relayrl sync, subproc and async (2 workers),
gymnasium SyncVectorEnv and AsyncVectorEnv(shared_memory=True); and a costly env (CartPole with
200 µs of busy-waiting per step) for relayrl sync vs subproc. Each figure is the median of 3
repetitions of at least ``--steps`` env steps, construction excluded.

    python benchmarks/env_throughput.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

import relayrl.testing.envs  # noqa: F401  (registers relayrl-test/SlowCartPole-v0)
from relayrl.envs import make_vec

SLOW_ID = "relayrl.testing.envs:relayrl-test/SlowCartPole-v0"


def relayrl_rate(env_id: str, manager: str, num_envs: int, steps: int, **kw) -> float:
    with make_vec(env_id, num_envs, manager=manager, seed=0, **kw) as venv:
        rng = np.random.default_rng(0)
        ids = np.arange(num_envs)
        if manager == "async":
            venv.send(rng.integers(0, 2, num_envs))
        done, start = 0, time.perf_counter()
        while done < steps:
            if manager == "async":
                result = venv.recv()
                venv.send(rng.integers(0, 2, len(result.env_ids)))
                done += len(result.env_ids)
            else:
                venv.step(rng.integers(0, 2, len(ids)))
                done += num_envs
        return done / (time.perf_counter() - start)


def gym_rate(vector_cls, num_envs: int, steps: int, **kw) -> float:
    env = vector_cls([lambda: gym.make("CartPole-v1")] * num_envs, **kw)
    try:
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        done, start = 0, time.perf_counter()
        while done < steps:
            env.step(rng.integers(0, 2, num_envs))
            done += num_envs
        return done / (time.perf_counter() - start)
    finally:
        env.close()


def median_of(fn, reps: int) -> float:
    return statistics.median(fn() for _ in range(reps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--slow-steps", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    w = args.workers
    rows = []
    for n in (8, 32):
        figures = {
            "relayrl sync": median_of(lambda: relayrl_rate("CartPole-v1", "sync", n, args.steps), args.reps),
            f"relayrl subproc ({w} workers)": median_of(
                lambda: relayrl_rate("CartPole-v1", "subproc", n, args.steps, workers=w), args.reps),
            f"relayrl async ({w} workers)": median_of(
                lambda: relayrl_rate("CartPole-v1", "async", n, args.steps, workers=w), args.reps),
            "gymnasium SyncVectorEnv": median_of(
                lambda: gym_rate(gym.vector.SyncVectorEnv, n, args.steps), args.reps),
            "gymnasium AsyncVectorEnv(shm)": median_of(
                lambda: gym_rate(gym.vector.AsyncVectorEnv, n, min(args.steps, 60_000), shared_memory=True),
                args.reps),
        }
        for name, rate in figures.items():
            rows.append((f"CartPole-v1 x{n}", name, rate))
            print(f"CartPole-v1 x{n:<3} {name:<32} {rate:>12,.0f} steps/s", flush=True)
        sub = figures[f"relayrl subproc ({w} workers)"]
        print(f"  subproc / gymnasium Async = {sub / figures['gymnasium AsyncVectorEnv(shm)']:.1f}x, "
              f"subproc / gymnasium Sync = {sub / figures['gymnasium SyncVectorEnv']:.2f}x", flush=True)
    n = 8
    sync = median_of(lambda: relayrl_rate(SLOW_ID, "sync", n, args.slow_steps), args.reps)
    sub = median_of(lambda: relayrl_rate(SLOW_ID, "subproc", n, args.slow_steps, workers=w), args.reps)
    print(f"SlowCartPole (200 us/step) x{n}: relayrl sync {sync:,.0f} steps/s, subproc ({w} workers) "
          f"{sub:,.0f} steps/s, subproc / sync = {sub / sync:.2f}x")


if __name__ == "__main__":
    main()
