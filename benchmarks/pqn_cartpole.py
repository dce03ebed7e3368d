"""Time to solve CartPole-v1: relayrl's default PQN against Stable-Baselines3 DQN (RL Zoo hyperparameters).

PQN (Gallici et al. 2025) learns Q values from rollouts of many envs with no replay buffer and no target
network; the anchor is SB3's DQN as benchmarks/dqn_cartpole.py runs it (RL Zoo's CartPole-v1 settings). Both
evaluate 10 deterministic episodes every 5,000 env steps and stop at a mean return of 475; time is wall time from
the start of training to the end of the first evaluation that reached it. Runs alternate seed by seed.

    python benchmarks/pqn_cartpole.py            # seeds 0-4
"""

from __future__ import annotations

import argparse

from common import Comparison, TimeToTarget, run_relayrl
from dqn_cartpole import EVAL_EPISODES, EVAL_EVERY, STOP
from dqn_cartpole import run_sb3 as run_sb3_dqn


def run_ours(seed: int, args: argparse.Namespace) -> dict:
    return run_relayrl("pqn", seed, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def run_sb3(seed: int, args: argparse.Namespace) -> dict:
    return run_sb3_dqn(seed, args.sb3_budget)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sb3-budget", type=int, default=100_000, help="SB3 DQN's env step budget")


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": run_sb3}, TimeToTarget(STOP), seeds=[0, 1, 2, 3, 4],
               budget=200_000, budget_help="relayrl's env step budget", options=options).main()
