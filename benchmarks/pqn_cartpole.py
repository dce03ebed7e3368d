"""Time to solve CartPole-v1: relayrl's default PQN against Stable-Baselines3 DQN (RL Zoo hyperparameters).

PQN (Gallici et al. 2025) learns Q values from rollouts of many envs with no replay buffer and no target
network; the anchor is SB3's DQN as benchmarks/dqn_cartpole.py runs it (RL Zoo's CartPole-v1 settings). Both
evaluate 10 deterministic episodes every 5,000 env steps and stop at a mean return of 475; time is wall time from
the start of training to the end of the first evaluation that reached it. Runs alternate seed by seed.

    python benchmarks/pqn_cartpole.py            # seeds 0-4
"""

from __future__ import annotations

import argparse
import json

from common import launch, report, row, run_relayrl
from dqn_cartpole import EVAL_EPISODES, EVAL_EVERY, STOP
from dqn_cartpole import run_sb3 as run_sb3_dqn


def run_ours(seed: int, budget: int) -> dict:
    return run_relayrl("pqn", seed, budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=200_000, help="relayrl's env step budget")
    parser.add_argument("--sb3-budget", type=int, default=100_000, help="SB3 DQN's env step budget")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = run_ours(args.seed, args.budget) if args.child == "relayrl" else run_sb3_dqn(args.seed, args.sb3_budget)
        print("RESULT " + json.dumps(out))
        return
    extra = ["--budget", str(args.budget), "--sb3-budget", str(args.sb3_budget)]
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
