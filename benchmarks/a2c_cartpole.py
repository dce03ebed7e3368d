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
import json

from common import launch, report, row, run_relayrl, sb3_learn_until

STOP, EVAL_EVERY, EVAL_EPISODES = 475.0, 5_000, 10
N_ENVS = 8
SB3_BUDGET = 500_000  # RL Zoo's n_timesteps for CartPole-v1 A2C


def run_ours(seed: int, budget: int) -> dict:
    return run_relayrl("a2c", seed, budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def run_sb3(seed: int, budget: int) -> dict:
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
    model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, budget, STOP, EVAL_EVERY // N_ENVS, EVAL_EPISODES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=200_000, help="relayrl's env step budget")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = run_ours(args.seed, args.budget) if args.child == "relayrl" else run_sb3(args.seed, SB3_BUDGET)
        print("RESULT " + json.dumps(out))
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
