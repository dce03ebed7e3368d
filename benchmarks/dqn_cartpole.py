"""Time to solve CartPole-v1: relayrl's default DQN against Stable-Baselines3 DQN (RL Zoo hyperparameters).

Both evaluate 10 deterministic episodes every 5,000 env steps and stop at a mean return of 475;
time is wall time from the start of training to the end of the first evaluation that reached it.

    python benchmarks/dqn_cartpole.py            # seeds 0-4
"""

from __future__ import annotations

import argparse
import json

from common import launch, report, row, run_relayrl, sb3_learn_until

STOP, EVAL_EVERY, EVAL_EPISODES = 475.0, 5_000, 10


def run_ours(seed: int, budget: int) -> dict:
    return run_relayrl("dqn", seed, budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def run_sb3(seed: int, budget: int) -> dict:
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
    model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
                gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                exploration_fraction=0.16, exploration_final_eps=0.04, policy_kwargs={"net_arch": [256, 256]},
                seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=100_000, help="env step budget for both")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = run_ours if args.child == "relayrl" else run_sb3
        print("RESULT " + json.dumps(run(args.seed, args.budget)))
        return
    results: dict[str, list[dict]] = {"relayrl": [], "sb3": []}
    print(f"{'seed':>4} {'library':>8} {'time to 475 (s)':>16} {'env steps':>10} {'updates':>8}")
    for seed in args.seeds:
        for which in ("relayrl", "sb3"):
            r = launch(__file__, which, seed, "--budget", str(args.budget))
            results[which].append(r)
            print(row(seed, which, r), flush=True)
    report(results, STOP)


if __name__ == "__main__":
    main()
