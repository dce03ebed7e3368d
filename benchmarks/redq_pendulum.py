"""Env steps (and time) to an eval mean of -200 on Pendulum-v1: relayrl's default REDQ against relayrl's default
SAC, both evaluating 5 deterministic episodes every 1,000 env steps, seeds alternating. The issue's figure:
REDQ's env steps <= 0.5 x SAC's (REDQ trades updates, 5 per env step by default, for samples).

    python benchmarks/redq_pendulum.py            # seeds 0-4
"""

from __future__ import annotations

import argparse
import json
import statistics

from common import launch, report, row, run_relayrl

STOP, EVAL_EVERY, EVAL_EPISODES = -200.0, 1_000, 5


def run(algo: str, seed: int, budget: int, sets: tuple[str, ...]) -> dict:
    mine = tuple(s for s in sets if s.startswith(f"{algo}.") or "." not in s.split("=")[0])
    return run_relayrl(algo, seed, budget, STOP, EVAL_EVERY, EVAL_EPISODES, env_id="Pendulum-v1", sets=mine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=20_000)
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help="extra relayrl options (redq.* go to REDQ only, sac.* to SAC only)")
    parser.add_argument("--only", choices=["redq", "sac"], help="run one side only")
    parser.add_argument("--child", choices=["redq", "sac"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run(args.child, args.seed, args.budget, tuple(args.sets))))
        return
    sides = [args.only] if args.only else ["redq", "sac"]
    results: dict[str, list[dict]] = {side: [] for side in sides}
    print(f"{'seed':>4} {'library':>8} {'time to -200 (s)':>16} {'env steps':>10} {'updates':>8}")
    for seed in args.seeds:
        for which in sides:
            r = launch(__file__, which, seed, "--budget", str(args.budget), *[f"--set={s}" for s in args.sets])
            results[which].append(r)
            print(row(seed, which, r), flush=True)
    if len(sides) == 2:
        report(results, STOP)
        steps = {k: statistics.median(r["steps"] or float("inf") for r in v) for k, v in results.items()}
        print(f"env steps ratio redq/sac {steps['redq'] / steps['sac']:.3f} (the issue's figure: <= 0.5)")


if __name__ == "__main__":
    main()
