"""BC and IQL on two mixed-quality Pendulum-v1 datasets that relayrl wrote from one SAC run:

- replay: the run's whole replay (uniform random warm-up, a learning policy, a good one);
- medium-expert: `relayrl collect` episodes of a partly trained policy (the run's checkpoint at a quarter of its
  updates, stochastic) and as many of its best policy (deterministic), as D4RL's medium-expert.

Each offline learner's last policy is set against the best policy in the data (the SAC run's best checkpoint)
and a uniform random policy, all evaluated on the same EVAL_EPISODES episodes (the same seeds: Pendulum's
start states decide much of a return), as a normalised score (D4RL's: 0 random, 1 the best policy in the
data; the issue asks >= 0.9).

    python benchmarks/offline_pendulum.py                        # seeds 0-2, SAC 10k steps, 20k updates each
    python benchmarks/offline_pendulum.py --seeds 0 --sac-steps 8000 --updates 5000    # a smoke run
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np

import relayrl
from relayrl.data.datasets import save_dataset
from relayrl.training.collect import collect_dataset
from relayrl.training.saved_policy import evaluate_checkpoint

EVAL_EPISODES = 20
EVAL_SEED = 123_456


def paired_return(checkpoint: Path) -> float:
    return evaluate_checkpoint(checkpoint, episodes=EVAL_EPISODES, seed=EVAL_SEED)["return_mean"]


def random_return(episodes: int = EVAL_EPISODES) -> float:
    env = gym.make("Pendulum-v1")
    env.action_space.seed(EVAL_SEED)
    returns = []
    for k in range(episodes):
        env.reset(seed=EVAL_SEED + k)
        done, total = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def medium_expert(sac: Path, folder: Path, episodes: int, seed: int) -> Path:
    """Episodes of the SAC run's partly trained policy (stochastic) and of its best one, in one .npz."""
    medium = sorted((sac / "checkpoints").glob("update_*.safetensors"))[0]
    parts = [collect_dataset(medium, episodes, folder / "medium.npz", stochastic=True, seed=seed),
             collect_dataset(sac, episodes, folder / "expert.npz", seed=seed + 1000)]
    arrays = [dict(np.load(part["path"])) for part in parts]
    print(f"     medium-expert: returns {parts[0]['return_mean']:.1f} (medium) and {parts[1]['return_mean']:.1f} (expert)")
    return save_dataset(folder / "medium_expert.npz", {k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]})


def offline(algo: str, dataset: Path, run_dir: Path, seed: int, updates: int) -> tuple[float, float]:
    """The last policy's paired return, and the run's wall time."""
    run = relayrl.train(algo, "Pendulum-v1", {algo: {"dataset": str(dataset)}, "eval": {"freq": 0, "episodes": 5}},
                        run_dir=run_dir, total_steps=updates, seed=seed)
    return paired_return(run_dir / "checkpoints" / "last.safetensors"), run.summary["wall_time_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sac-steps", type=int, default=10_000, help="env steps of the SAC run whose replay is the data")
    parser.add_argument("--updates", type=int, default=20_000, help="gradient updates of BC and of IQL")
    parser.add_argument("--episodes", type=int, default=10, help="medium-expert: episodes of each policy")
    args = parser.parse_args()
    print(f"{'seed':>4} {'dataset':>13} {'best in data':>12} {'random':>8} | {'algo':>4} {'return':>8} {'score':>6} "
          f"{'time s':>7}")
    scores: dict[tuple[str, str], list[float]] = {}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            relayrl.train("sac", "Pendulum-v1", {"eval": {"freq": 1000, "episodes": EVAL_EPISODES},
                                                       "save_freq": max(1, (args.sac_steps - 1000) // 4)},
                                run_dir=folder / "sac", total_steps=args.sac_steps, seed=seed)
            best, rand = paired_return(folder / "sac" / "checkpoints" / "best.safetensors"), random_return()
            datasets = {"replay": folder / "sac", "medium-expert": medium_expert(folder / "sac", folder,
                                                                                args.episodes, seed)}
            for name, dataset in datasets.items():
                for algo in ("bc", "iql"):
                    ret, seconds = offline(algo, dataset, folder / f"{algo}-{name}", seed, args.updates)
                    score = (ret - rand) / (best - rand)
                    scores.setdefault((name, algo), []).append(score)
                    print(f"{seed:>4} {name:>13} {best:>12.1f} {rand:>8.1f} | {algo:>4} {ret:>8.1f} {score:>6.2f} "
                          f"{seconds:>7.1f}", flush=True)
    for (name, algo), values in scores.items():
        print(f"{name} {algo}: normalised score {np.mean(values):.2f} (min {np.min(values):.2f}) over "
              f"{len(values)} seed(s)")


if __name__ == "__main__":
    main()
