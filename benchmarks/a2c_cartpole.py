"""Time to solve CartPole-v1: relayrl's default A2C against Stable-Baselines3 A2C (RL Zoo hyperparameters).

RL Zoo's CartPole-v1 A2C: 8 envs, ent_coef 0.0, SB3's A2C defaults otherwise (n_steps 5, RMSprop, lr 7e-4,
gae_lambda 1.0, vf_coef 0.5, max_grad_norm 0.5); relayrl's a2c defaults are the same. Both evaluate 10
deterministic episodes every 5,000 env steps and stop at a mean return of 475; time is wall time from the start
of training to the end of the first evaluation that reached it. Each run is a fresh process; runs alternate
between the two libraries seed by seed so both see the same machine conditions.

    pip install -c constraints.txt -e '.[bench]'
    python benchmarks/a2c_cartpole.py --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse

from common import Comparison, TimeToTarget, run_relayrl, sb3_envs, sb3_learn_until

STOP, EVAL_EVERY, EVAL_EPISODES = 475.0, 5_000, 10
N_ENVS = 8
SB3_BUDGET = 500_000  # RL Zoo's n_timesteps for CartPole-v1 A2C


def run_ours(seed: int, args: argparse.Namespace) -> dict:
    return run_relayrl("a2c", seed, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def run_sb3(seed: int, args: argparse.Namespace) -> dict:
    from stable_baselines3 import A2C

    env, eval_env = sb3_envs("CartPole-v1", seed, n_envs=N_ENVS)
    model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, SB3_BUDGET, STOP, EVAL_EVERY // N_ENVS, EVAL_EPISODES)


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": run_sb3}, TimeToTarget(STOP), seeds=[0, 1, 2, 3, 4],
               budget=200_000, budget_help="relayrl's env step budget").main()
