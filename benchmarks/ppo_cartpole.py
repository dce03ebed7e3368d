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

from common import Comparison, TimeToTarget, run_relayrl, sb3_envs, sb3_learn_until

STOP = 475.0
EVAL_EVERY = 5_000
EVAL_EPISODES = 10
SB3_BUDGET = 100_000  # RL Zoo's n_timesteps for CartPole-v1 (sets the linear schedules)


def run_ours(seed: int, args: argparse.Namespace) -> dict:
    return run_relayrl("ppo", seed, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def run_sb3(seed: int, args: argparse.Namespace) -> dict:
    import torch
    from stable_baselines3 import PPO

    if args.sb3_threads:
        torch.set_num_threads(args.sb3_threads)

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    env, eval_env = sb3_envs("CartPole-v1", seed, n_envs=8)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, SB3_BUDGET, STOP, EVAL_EVERY // 8, EVAL_EPISODES)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sb3-threads", type=int, default=None,
                        help="torch threads for SB3 (default: torch's own choice, as SB3 users run it)")


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": run_sb3}, TimeToTarget(STOP), seeds=[0, 1, 2],
               budget=150_000, budget_help="relayrl's env step budget", options=options).main()
