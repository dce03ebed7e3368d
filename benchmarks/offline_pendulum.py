"""BC and IQL on a mixed-quality Pendulum-v1 dataset that relayrl wrote: the whole replay of a SAC run
(uniform random warm-up, a learning policy, a good one). Each offline learner's final eval return is set
against the best policy in the data (the SAC run's best evaluation) and a uniform random policy, as a
normalised score (D4RL's: 0 random, 1 the best policy in the data; the issue asks >= 0.9).

    python benchmarks/offline_pendulum.py                        # seeds 0-2, SAC 10k steps, 20k updates each
    python benchmarks/offline_pendulum.py --seeds 0 --sac-steps 6000 --updates 5000    # a smoke run
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import relayrl

EVAL_EPISODES = 10


def random_return(seed: int, episodes: int = EVAL_EPISODES) -> float:
    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    returns = []
    for k in range(episodes):
        env.reset(seed=seed + k)
        done, total = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def offline(algo: str, dataset: Path, folder: Path, seed: int, updates: int) -> tuple[dict, float]:
    start = time.perf_counter()
    run = relayrl.train(algo, "Pendulum-v1", {algo: {"dataset": str(dataset)},
                                              "eval": {"freq": max(1, updates // 4), "episodes": EVAL_EPISODES}},
                        run_dir=folder / algo, total_steps=updates, seed=seed)
    return run.summary, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sac-steps", type=int, default=10_000, help="env steps of the SAC run whose replay is the data")
    parser.add_argument("--updates", type=int, default=20_000, help="gradient updates of BC and of IQL")
    args = parser.parse_args()
    print(f"{'seed':>4} {'data':>9} {'best in data':>12} {'random':>8} | {'algo':>4} {'return':>8} {'score':>6} {'time s':>7}")
    scores: dict[str, list[float]] = {"bc": [], "iql": []}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            sac = relayrl.train("sac", "Pendulum-v1", {"eval": {"freq": 1000, "episodes": EVAL_EPISODES}},
                                run_dir=folder / "sac", total_steps=args.sac_steps, seed=seed).summary
            best, rand = sac["best_eval_return"], random_return(seed)
            for algo in ("bc", "iql"):
                summary, seconds = offline(algo, folder / "sac", folder, seed, args.updates)
                ret = summary["last_eval_return"]
                score = (ret - rand) / (best - rand)
                scores[algo].append(score)
                print(f"{seed:>4} {sac['env_steps']:>9} {best:>12.1f} {rand:>8.1f} | {algo:>4} {ret:>8.1f} "
                      f"{score:>6.2f} {seconds:>7.1f}", flush=True)
    for algo, values in scores.items():
        print(f"{algo}: normalised score {np.mean(values):.2f} (min {np.min(values):.2f}) over {len(values)} seed(s)")


if __name__ == "__main__":
    main()
