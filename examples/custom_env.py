"""Train PPO on an env of your own, given as a factory function (examples/my_env.py).

    python examples/custom_env.py [--total-steps N] [--workers N]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `examples` importable from any directory

import relayrl  # noqa: E402
from examples.my_env import make_env  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total-steps", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--run-dir", default=None)
    args = parser.parse_args()
    run = relayrl.train("ppo", make_env, {"eval": {"freq": 2048, "episodes": 4}}, total_steps=args.total_steps,
                        stop_value=0.9, workers=args.workers, run_dir=args.run_dir, seed=0)
    print(f"{run.summary['env']}: best eval return {run.summary['best_eval_return']:.2f} "
          f"(solved: {run.summary['solved']})")


if __name__ == "__main__":
    main()
