"""Runtime scaling: SAC collection throughput per backend and worker count, weight broadcast cost,
and PPO time-to-475 on CartPole with mp workers against the plain local run.

Ray is started once, locally, for the Ray rows (the ray extra: ``python -m pip install -c constraints.txt -e '.[ray]'``).

Collection: SAC's workers on Pendulum-v1 with 1 ms of busy-waiting per step (an env whose cost is
CPU, like a simulator), 1 env per worker, for ``--seconds`` after a warm-up; the learner side only
pulls chunks (no updates), so this measures what the runtime can deliver.

    python benchmarks/scaling.py [--seconds 8] [--skip-ppo]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from relayrl.config import build_config

ENV = "relayrl.testing.envs:relayrl-test/SlowPendulum-v0"


def collection_rate(backend: str, workers: int, seconds: float) -> float:
    from relayrl.algos import get_algo
    from relayrl.runtime import make_pool

    config = build_config("sac", None, [f"backend={backend}", f"workers={workers}", f"env.id={ENV}",
                                        "env.kwargs={busy_us: 1000}", "env.num_envs=1"])
    pool = make_pool(config)
    try:
        import gymnasium as gym

        obs_space = gym.spaces.Box(-float("inf"), float("inf"), (3,))
        act_space = gym.spaces.Box(-2.0, 2.0, (1,))
        algo = get_algo("sac").algo_cls(config.sac, obs_space, act_space, 1)
        pool.reset(0)
        pool.publish(algo.policy.get_weights(), 0)
        warm_end = time.monotonic() + 2.0
        while time.monotonic() < warm_end:
            pool.pull()
        start, steps = time.monotonic(), 0
        while time.monotonic() - start < seconds:
            steps += pool.pull()[1]
        return steps / (time.monotonic() - start)
    finally:
        pool.close()


def broadcast_cost(backend: str, workers: int, reps: int = 20) -> tuple[float, int]:
    """Median seconds for one publish of a ~1M-parameter policy to ``workers`` workers."""
    import gymnasium as gym

    from relayrl.algos import get_algo
    from relayrl.runtime import make_pool
    from relayrl.runtime.weights import flatten

    config = build_config("ppo", None, [f"backend={backend}", f"workers={workers}", "env.num_envs=1",
                                        "ppo.hidden_sizes=[700,700]"])  # actor + critic: ~0.99M parameters
    pool = make_pool(config)
    try:
        env = gym.make("CartPole-v1")
        weights = get_algo("ppo").algo_cls(config.ppo, env.observation_space, env.action_space, 1).policy.get_weights()
        size = sum(a.size for a in flatten(weights)[0].values())
        pool.reset(0)
        times = []
        for version in range(reps):
            start = time.perf_counter()
            pool.publish(weights, version)
            times.append(time.perf_counter() - start)
        return statistics.median(times[1:]), size  # the first mp publish also starts the workers
    finally:
        pool.close()


def ppo_time(backend: str, workers: int, seed: int) -> float | None:
    from relayrl import launch

    config = build_config("ppo", None, [f"backend={backend}", f"workers={workers}",
                                        f"env.num_envs={8 // workers}"], {"seed": seed, "total_steps": 200_000})
    run_dir = tempfile.mkdtemp(prefix=f"relayrl-scaling-{backend}-{workers}-{seed}-")  # a new run each time
    summary = launch.run(config, run_dir=run_dir, tensorboard=False)
    return summary["time_to_stop_value_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--skip-ppo", action="store_true")
    args = parser.parse_args()
    import os

    import ray

    ray.init(num_cpus=max(4, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False)

    print("SAC collection, Pendulum-v1 + 1 ms/step, 1 env per worker (env steps/s)")
    inline = collection_rate("inline", 1, args.seconds)
    print(f"  inline  x1: {inline:8.1f}")
    for backend, workers in (("inline", 2), ("mp", 1), ("mp", 2), ("mp", 4), ("ray", 1), ("ray", 2), ("ray", 4)):
        rate = collection_rate(backend, workers, args.seconds)
        print(f"  {backend:<6} x{workers}: {rate:8.1f}  ({rate / inline:.2f}x inline x1)")

    print("\nweight broadcast of a 1M-parameter policy to 4 workers (median of 19)")
    for backend in ("inline", "mp", "ray"):
        seconds, size = broadcast_cost(backend, 4)
        print(f"  {backend:<6}: {seconds * 1e3:7.2f} ms ({size:,} parameters)")

    if not args.skip_ppo:
        print("\nPPO CartPole-v1 time to 475 (8 envs in total), seeds 0-2")
        for backend, workers in (("inline", 1), ("mp", 2), ("ray", 2)):
            times = [ppo_time(backend, workers, seed) for seed in range(3)]
            shown = ", ".join("unsolved" if t is None else f"{t:.2f}" for t in times)
            solved = [t for t in times if t is not None]
            median = statistics.median(solved) if len(solved) == len(times) else float("nan")
            print(f"  {backend:<6} x{workers}: {shown} s, median {median:.2f} s")


if __name__ == "__main__":
    main()
