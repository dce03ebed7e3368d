"""Time to an eval mean of -200 on Pendulum-v1: relayrl's default CrossQ against Stable-Baselines3 SAC
(its defaults, learning_starts 1000: SB3 has no CrossQ; SBX's is JAX), both evaluating 5 deterministic
episodes every 1,000 env steps. The issue's goal: relayrl's CrossQ in at most 0.25x SB3 SAC's time.

    python benchmarks/crossq_pendulum.py                                   # seeds 0-4
    python benchmarks/crossq_pendulum.py --only relayrl --seeds 0 \\
        --set "crossq.critic_hidden_sizes=[2048, 2048]"                    # the paper's critic width
"""

from __future__ import annotations

import argparse

from common import Comparison, TimeToTarget, run_relayrl
from sac_pendulum import EVAL_EPISODES, EVAL_EVERY, STOP
from sac_pendulum import run_sb3 as run_sb3_sac


def run_ours(seed: int, args: argparse.Namespace) -> dict:
    return run_relayrl("crossq", seed, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES, env_id="Pendulum-v1",
                       sets=tuple(args.sets))


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": run_sb3_sac}, TimeToTarget(STOP),
               seeds=[0, 1, 2, 3, 4], budget=20_000, sets_help="extra relayrl options", only=True).main()
