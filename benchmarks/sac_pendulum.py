"""Time to an eval mean of -200 on Pendulum-v1: relayrl's default SAC against Stable-Baselines3 SAC
(its defaults, learning_starts 1000), both evaluating 5 deterministic episodes every 1,000 env steps.

    python benchmarks/sac_pendulum.py            # seeds 0-4
"""

from __future__ import annotations

import argparse

from common import Comparison, TimeToTarget, run_relayrl, sb3_envs, sb3_learn_until

STOP, EVAL_EVERY, EVAL_EPISODES = -200.0, 1_000, 5


def run_ours(seed: int, args: argparse.Namespace) -> dict:
    return run_relayrl("sac", seed, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES, env_id="Pendulum-v1",
                       sets=tuple(args.sets))


def run_sb3(seed: int, args: argparse.Namespace) -> dict:
    from stable_baselines3 import SAC

    env, eval_env = sb3_envs("Pendulum-v1", seed)
    model = SAC("MlpPolicy", env, learning_starts=1000, seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES)


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": run_sb3}, TimeToTarget(STOP),
               seeds=[0, 1, 2, 3, 4], budget=20_000, sets_help="extra relayrl options", only=True).main()
