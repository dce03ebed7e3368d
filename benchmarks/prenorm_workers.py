"""PPO's prenorm on rollout workers against one process (issue 27): the same final return?

PPO with ``obs_norm`` and ``prenorm`` (``prenormalize_steps`` vector steps warm the statistics up before
learning) on Pendulum-v1, 8 envs in all: one process (the learner's own 8 envs), or 2 mp workers of 4 envs
each (their first rollouts are the warm-up: training/onpolicy.py). Same seeds, budget and config otherwise;
evaluation every ``--eval-every`` env steps, 10 episodes. Prints each run's best and last evaluation and
the workers' sampling figures (workers/ideal_steps_per_s, workers/overhead).

    python benchmarks/prenorm_workers.py --seeds 0 1 2 --budget 200000 [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def run(where: str, seed: int, args: argparse.Namespace) -> dict:
    from relayrl import launch
    from relayrl.config import build_config

    sets = ["threads=1", "ppo.obs_norm=true", "ppo.prenorm=true", f"eval.freq={args.eval_every}", "eval.episodes=10"]
    sets += ["env.num_envs=8"] if where == "one process" else ["backend=mp", "workers=2", "env.num_envs=4"]
    config = build_config("ppo", None, sets, {"env.id": "Pendulum-v1", "total_steps": args.budget, "seed": seed})
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        summary = launch.run(config, run_dir=Path(folder) / "run", tensorboard=False, quiet=True)
        wall = time.perf_counter() - start
        rows = [json.loads(line) for line in (Path(folder) / "run" / "metrics.jsonl").read_text().splitlines()]
    trains = [r for r in rows if r["event"] == "train" and "workers/ideal_steps_per_s" in r]
    out = {"where": where, "seed": seed, "best_eval": summary["best_eval_return"],
           "last_eval": summary["last_eval_return"], "wall_s": round(wall, 1)}
    if trains:
        out["ideal_steps_per_s"] = statistics.median(r["workers/ideal_steps_per_s"] for r in trains)
        out["steps_per_s"] = statistics.median(r["workers/steps_per_s"] for r in trains)
        out["overhead"] = statistics.median(r["workers/overhead"] for r in trains)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=200_000)
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        for where in ("one process", "2 mp workers"):
            results.append(run(where, seed, args))
            r = results[-1]
            extra = (f"  ideal {r['ideal_steps_per_s']:.0f}/s seen {r['steps_per_s']:.0f}/s overhead "
                     f"{r['overhead']:.2f}" if "overhead" in r else "")
            print(f"seed {seed} {where:>12}: best eval {r['best_eval']:8.1f} last {r['last_eval']:8.1f} "
                  f"({r['wall_s']} s){extra}", flush=True)
    for where in ("one process", "2 mp workers"):
        mine = [r for r in results if r["where"] == where]
        print(f"{where}: median best eval {statistics.median(r['best_eval'] for r in mine):.1f}, median last "
              f"{statistics.median(r['last_eval'] for r in mine):.1f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
