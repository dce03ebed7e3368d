"""Time to solve CartPole-v1: relayrl's default DQN against Stable-Baselines3 DQN (RL Zoo hyperparameters).

Both evaluate 10 deterministic episodes every 5,000 env steps and stop at a mean return of 475;
time is wall time from the start of training to the end of the first evaluation that reached it.

    python benchmarks/dqn_cartpole.py            # seeds 0-4
"""

from __future__ import annotations

import argparse

from common import Comparison, TimeToTarget, run_relayrl, sb3_envs, sb3_learn_until

STOP, EVAL_EVERY, EVAL_EPISODES = 475.0, 5_000, 10


def run_ours(seed: int, args: argparse.Namespace) -> dict:
    return run_relayrl("dqn", seed, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def run_sb3(seed: int, budget: int) -> dict:
    from stable_baselines3 import DQN

    env, eval_env = sb3_envs("CartPole-v1", seed)
    model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
                gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                exploration_fraction=0.16, exploration_final_eps=0.04, policy_kwargs={"net_arch": [256, 256]},
                seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, budget, STOP, EVAL_EVERY, EVAL_EPISODES)


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": lambda seed, args: run_sb3(seed, args.budget)},
               TimeToTarget(STOP), seeds=[0, 1, 2, 3, 4], budget=100_000, budget_help="env step budget for both").main()
