"""Env steps (and time) to an eval mean of -200 on Pendulum-v1: relayrl's default REDQ against relayrl's default
SAC, both evaluating 5 deterministic episodes every 1,000 env steps, seeds alternating. The issue's figure:
REDQ's env steps <= 0.5 x SAC's (REDQ trades updates, 5 per env step by default, for samples).

    python benchmarks/redq_pendulum.py            # seeds 0-4
"""

from __future__ import annotations

import argparse
import statistics

from common import Comparison, Run, TimeToTarget, run_relayrl
from sac_pendulum import EVAL_EPISODES, EVAL_EVERY, STOP


def side(algo: str) -> Run:
    """relayrl's ``algo`` with the ``--set`` options meant for it (its own section's and the top-level ones)."""

    def run(seed: int, args: argparse.Namespace) -> dict:
        mine = tuple(s for s in args.sets if s.startswith(f"{algo}.") or "." not in s.split("=")[0])
        return run_relayrl(algo, seed, args.budget, STOP, EVAL_EVERY, EVAL_EPISODES, env_id="Pendulum-v1", sets=mine)

    return run


def main() -> None:
    results = Comparison(__file__, __doc__, {"redq": side("redq"), "sac": side("sac")}, TimeToTarget(STOP),
                         seeds=[0, 1, 2, 3, 4], budget=20_000, only=True,
                         sets_help="extra relayrl options (redq.* go to REDQ only, sac.* to SAC only)").main()
    if results is not None and len(results) == 2:
        steps = {k: statistics.median(r["steps"] or float("inf") for r in v) for k, v in results.items()}
        print(f"env steps ratio redq/sac {steps['redq'] / steps['sac']:.3f} (the issue's figure: <= 0.5)")


if __name__ == "__main__":
    main()
