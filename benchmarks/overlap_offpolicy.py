"""Off-policy learning overlapped with collection (issue 29): a replay algorithm's env steps per second with
``overlap`` off and on, same settings, side by side.

    python benchmarks/overlap_offpolicy.py [--algo dqn] [--env MinAtar/Breakout-v1] [--steps 20000] [--rounds 3]
                                           [--set KEY=VALUE ...]

Each run is a fresh process training ``--algo`` on ``--env`` for ``--steps`` env steps with relayrl's defaults
for it (plus ``--set``), no evaluation, learning from ``--start`` transitions on; the runs alternate off, on,
off, on, ... (``--rounds`` of each), so a change in the machine's load hits both. The rate is the run's own
``env_steps_per_s`` (env steps over the training's wall time). Prints one JSON line per run (with the 1-minute
load average as it started), then a markdown table: the medians, each side's range, and the ratio on / off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import launch  # noqa: E402

SIDES = ("off", "on")


def child(args: argparse.Namespace) -> dict:
    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    sets = ["eval.freq=0", "eval.episodes=1", "eval.num_envs=1", f"{args.algo}.start_training={args.start}",
            f"overlap={'true' if args.child == 'on' else 'false'}", *args.set]
    config = build_config(args.algo, None, sets, {"env.id": args.env, "seed": args.seed, "total_steps": args.steps})
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_trainer(config, run_dir=tmp, tensorboard=False, quiet=True)
    return {"env_steps_per_s": summary["env_steps_per_s"], "updates": summary["updates"],
            "env_steps": summary["env_steps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="dqn")
    parser.add_argument("--env", default="MinAtar/Breakout-v1")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--start", type=int, default=1_000, help="transitions before learning starts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE, any relayrl option")
    parser.add_argument("--child", choices=SIDES)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return
    extra = ["--algo", args.algo, "--env", args.env, "--steps", str(args.steps), "--start", str(args.start)]
    for item in args.set:
        extra += ["--set", item]
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    for k in range(args.rounds):
        for side in SIDES:
            load = os.getloadavg()[0]
            result = launch(__file__, side, k, *extra)
            rates[side].append(result["env_steps_per_s"])
            print(json.dumps({"overlap": side, "round": k, "load1": round(load, 2), **result}), flush=True)
    med = {side: statistics.median(rates[side]) for side in SIDES}
    print(f"\n{args.algo} on {args.env}, {args.steps} env steps, {args.rounds} runs each ({os.cpu_count()} cores)\n")
    print("| overlap | env steps/s, median | range |")
    print("|---|---:|---|")
    for side in SIDES:
        print(f"| {side} | {med[side]:,.0f} | {min(rates[side]):,.0f}-{max(rates[side]):,.0f} |")
    print(f"\non / off: {med['on'] / med['off']:.2f}")


if __name__ == "__main__":
    main()
