"""An asymmetric actor-critic against the plain one (issue 27): PPO (or SAC) on a noisy-observation Pendulum.

``relayrl-test/NoisyPendulum-v0`` (relayrl/testing/envs.py) gives a Dict observation: ``obs``, Pendulum's
[cos, sin, thetadot] plus Gaussian noise of sd ``--noise`` times each component's bound (1, 1, 8), and
``state``, the clean observation. Both agents' actors read ``obs`` only; the asymmetric agent's critic reads
``state`` too (``ppo.critic_only_keys=[state]``, ``sac.`` with ``--algo sac``); the plain agent's critic reads
the noisy ``obs`` only (the same env with ``privileged=false``: no ``state`` key, the option off). Same seeds,
config and budget otherwise.

Steps to solve: env steps until the first evaluation (10 deterministic episodes every ``--eval-every``
steps) with mean return >= ``--target`` (-200, as the SAC/TD3 Pendulum figures). Runs go one after the
other, one torch thread, seed by seed alternating the two agents. Each algorithm's default config otherwise.

    python benchmarks/asymmetric_pendulum.py --seeds 0 1 2 3 4 --budget 400000 --noise 0.1 [--out results.json]
    python benchmarks/asymmetric_pendulum.py --algo sac --seeds 0 1 2 3 4 --budget 30000 --eval-every 1000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

ENV = "relayrl.testing.envs:relayrl-test/NoisyPendulum-v0"


def run(agent: str, seed: int, args: argparse.Namespace) -> dict:
    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    asymmetric, algo = agent == "asymmetric", args.algo
    sets = ["threads=1", f"env.kwargs={{noise: {args.noise}, privileged: {str(asymmetric).lower()}}}",
            f"eval.freq={args.eval_every}", "eval.episodes=10", *args.set]
    if algo == "ppo":
        sets.append("ppo.shared_trunk=false")
    if asymmetric:
        sets.append(f"{algo}.critic_only_keys=[state]")
    config = build_config(algo, None, sets, {"env.id": ENV, "seed": seed, "total_steps": args.budget,
                                             "stop_value": args.target})
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_trainer(config, run_dir=tmp, tensorboard=False)
    return {"agent": agent, "seed": seed, "steps_to_target": summary["env_steps_to_stop_value"],
            "best_eval": summary["best_eval_return"], "wall_s": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=["ppo", "sac"], default="ppo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=400_000, help="env steps per run")
    parser.add_argument("--target", type=float, default=-200.0)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--set", action="append", default=[], help="more relayrl options, both agents")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON")
    args = parser.parse_args()
    rows = []
    print(f"{'seed':>4} {'agent':>10} {'steps to ' + format(args.target, 'g'):>16} {'best eval':>10} {'wall s':>7}",
          flush=True)
    for seed in args.seeds:
        for agent in ("asymmetric", "plain") if seed % 2 == 0 else ("plain", "asymmetric"):
            row = run(agent, seed, args)
            rows.append(row)
            steps = "not solved" if row["steps_to_target"] is None else str(row["steps_to_target"])
            print(f"{seed:>4} {agent:>10} {steps:>16} {row['best_eval']:>10.1f} {row['wall_s']:>7}", flush=True)
            if args.out is not None:
                args.out.write_text(json.dumps(rows, indent=1))
    for agent in ("asymmetric", "plain"):
        mine = [r for r in rows if r["agent"] == agent]
        steps = [r["steps_to_target"] if r["steps_to_target"] is not None else float("inf") for r in mine]
        solved = sum(s != float("inf") for s in steps)
        print(f"{agent}: median steps to {args.target:g} {statistics.median(steps):g} ({solved}/{len(mine)} solved "
              f"within {args.budget}), median best eval {statistics.median(r['best_eval'] for r in mine):.1f}")


if __name__ == "__main__":
    main()
