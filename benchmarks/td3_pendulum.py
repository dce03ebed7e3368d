"""Time to an eval mean of -200 on Pendulum-v1: relayrl's default TD3 against Stable-Baselines3 TD3
(its defaults, learning_starts 1000, RL Zoo's Pendulum exploration noise: NormalActionNoise sigma 0.1), both
evaluating 5 deterministic episodes every 1,000 env steps. The issue's goal: relayrl <= 0.25 x SB3's time.

    python benchmarks/td3_pendulum.py            # seeds 0-4
"""

from __future__ import annotations

import argparse

from common import Comparison, TimeToTarget, run_relayrl, sb3_envs, sb3_learn_until
from sac_pendulum import EVAL_EPISODES, EVAL_EVERY, STOP


def run_ours(seed: int, args: argparse.Namespace) -> dict:
    return run_relayrl("td3", seed, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES, env_id="Pendulum-v1",
                       sets=tuple(args.sets))


def run_sb3(seed: int, args: argparse.Namespace) -> dict:
    import numpy as np
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    env, eval_env = sb3_envs("Pendulum-v1", seed)
    noise = NormalActionNoise(np.zeros(1), np.full(1, 0.1))
    model = TD3("MlpPolicy", env, learning_starts=1000, action_noise=noise, seed=seed, device="cpu")
    return sb3_learn_until(model, eval_env, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES)


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": run_sb3}, TimeToTarget(STOP),
               seeds=[0, 1, 2, 3, 4], budget=20_000, sets_help="extra relayrl options", only=True).main()
