"""Time to solve CartPole-v1: relayrl's default PPO against Stable-Baselines3 PPO (RL Zoo hyperparameters).

Both evaluate 10 deterministic episodes every 5,000 env steps and stop at a mean return of 475.
The time counted is wall time from the start of training (envs and model built, imports done) to
the end of the first evaluation that reached 475. Each run is a fresh process; runs alternate
between the two libraries seed by seed so both see the same machine conditions.

    pip install -c constraints.txt -e '.[bench]'
    python benchmarks/ppo_cartpole.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json

from common import launch, report, row, run_relayrl, sb3_learn_until

STOP = 475.0
EVAL_EVERY = 5_000
EVAL_EPISODES = 10
SB3_BUDGET = 100_000  # RL Zoo's n_timesteps for CartPole-v1 (sets the linear schedules)


def run_ours(seed: int, budget: int) -> dict:
    return run_relayrl("ppo", seed, budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def run_sb3(seed: int, budget: int, threads: int | None) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    if threads:
        torch.set_num_threads(threads)

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, budget, STOP, EVAL_EVERY // 8, EVAL_EPISODES)


def child(args: argparse.Namespace) -> None:
    if args.child == "relayrl":
        out = run_ours(args.seed, args.budget)
    else:
        out = run_sb3(args.seed, SB3_BUDGET, args.sb3_threads)
    print("RESULT " + json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=150_000, help="relayrl's env step budget")
    parser.add_argument("--sb3-threads", type=int, default=None,
                        help="torch threads for SB3 (default: torch's own choice, as SB3 users run it)")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    extra = ["--budget", str(args.budget)] + (["--sb3-threads", str(args.sb3_threads)] if args.sb3_threads else [])
    results: dict[str, list[dict]] = {"relayrl": [], "sb3": []}
    print(f"{'seed':>4} {'library':>8} {'time to 475 (s)':>16} {'env steps':>10} {'updates':>8}")
    for seed in args.seeds:
        for which in ("relayrl", "sb3"):
            r = launch(__file__, which, seed, *extra)
            results[which].append(r)
            print(row(seed, which, r), flush=True)
    report(results, STOP)


if __name__ == "__main__":
    main()
