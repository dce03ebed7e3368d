"""Time to an eval mean of -200 on Pendulum-v1: relayrl's default CrossQ against Stable-Baselines3 SAC
(its defaults, learning_starts 1000: SB3 has no CrossQ; SBX's is JAX), both evaluating 5 deterministic
episodes every 1,000 env steps. The issue's goal: relayrl's CrossQ in at most 0.25x SB3 SAC's time.

    python benchmarks/crossq_pendulum.py                                   # seeds 0-4
    python benchmarks/crossq_pendulum.py --only relayrl --seeds 0 \\
        --set "crossq.critic_hidden_sizes=[2048, 2048]"                    # the paper's critic width
"""

from __future__ import annotations

import argparse
import json

from common import launch, report, row, run_relayrl, sb3_learn_until

STOP, EVAL_EVERY, EVAL_EPISODES = -200.0, 1_000, 5


def run_ours(seed: int, budget: int, sets: tuple[str, ...]) -> dict:
    return run_relayrl("crossq", seed, budget, STOP, EVAL_EVERY, EVAL_EPISODES, env_id="Pendulum-v1", sets=sets)


def run_sb3(seed: int, budget: int) -> dict:
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
    eval_env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed + 10_000)
    model = SAC("MlpPolicy", env, learning_starts=1000, seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, budget, STOP, EVAL_EVERY, EVAL_EPISODES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=20_000)
    parser.add_argument("--set", dest="sets", action="append", default=[], help="extra relayrl options")
    parser.add_argument("--only", choices=["relayrl", "sb3"], help="run one side only")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = run_ours(args.seed, args.budget, tuple(args.sets)) if args.child == "relayrl" else \
            run_sb3(args.seed, args.budget)
        print("RESULT " + json.dumps(out))
        return
    sides = [args.only] if args.only else ["relayrl", "sb3"]
    results: dict[str, list[dict]] = {side: [] for side in sides}
    print(f"{'seed':>4} {'library':>8} {'time to -200 (s)':>16} {'env steps':>10} {'updates':>8}")
    for seed in args.seeds:
        for which in sides:  # (seeds alternate the two libraries, so a load change hits both)
            extra = ["--budget", str(args.budget), *[f"--set={s}" for s in args.sets]]
            r = launch(__file__, which, seed, *extra)
            results[which].append(r)
            print(row(seed, which, r), flush=True)
    if len(sides) == 2:
        report(results, STOP)


if __name__ == "__main__":
    main()
