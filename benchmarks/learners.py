"""Data-parallel learners (issue 30): a learner-bound run with 1 and with N learners, updates per second, side by side.

    python benchmarks/learners.py [--algo sac] [--env Pendulum-v1] [--learners 1 2] [--threads 1 2] [--rounds 3]
                                  [--steps 3000] [--set KEY=VALUE ...]

Each run is ``relayrl train`` in a fresh process with a learner-bound config (default: SAC with 256x256 networks
at batch 1,024, one update per env step, learning from 1,024 transitions on, no evaluation), for every pair of
``--learners`` N and ``--threads`` (torch threads per learner; pairs whose learners x threads exceed the machine's
cores are skipped). The pairs take turns, round after round, so a change in the machine's load hits all of them.

Two rates per run: *learn*, the median over its logged iterations (from the third on) of the updates per second
of learning (metrics.jsonl's ``time/updates_per_s``: an iteration's updates over its learning seconds, all-reduces
included); and *run*, updates over the run's wall time (collection included). An update is one optimiser step of the group on the whole batch (each of N
learners on batch / N rows). Prints one JSON line per run and a markdown table of the medians with the ratio to
the first pair's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_SETS = ["sac.hidden_sizes=[256,256]", "sac.batch_size=1024", "sac.start_training=1024",
                "sac.updates_per_step=1", "eval.freq=0", "eval.episodes=1", "eval.num_envs=1", "env.num_envs=2"]


def one_run(args: argparse.Namespace, learners: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        sets = [*DEFAULT_SETS, f"threads={threads}", *args.set] if args.algo == "sac" else [f"threads={threads}",
                                                                                              *args.set]
        cmd = [sys.executable, "-m", "relayrl", "train", args.algo, "--env", args.env, "--total-steps",
               str(args.steps), "--learners", str(learners), "--run-dir", str(run_dir), "--quiet"]
        for item in sets:
            cmd += ["--set", item]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"learners={learners} threads={threads} failed:\n{proc.stderr[-3000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [e["time/updates_per_s"] for e in events if e.get("event") == "train" and e.get("time/updates_per_s")]
    return {"learn_updates_per_s": statistics.median(rates[2:] or rates) if rates else 0.0,
            "run_updates_per_s": summary["updates"] / summary["wall_time_s"], "updates": summary["updates"],
            "env_steps": summary["env_steps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="sac")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--learners", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE, any relayrl option")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    pairs = [(n, t) for n in args.learners for t in args.threads if n * t <= cores]
    rates: dict[tuple[int, int], dict[str, list[float]]] = {p: {"learn": [], "run": []} for p in pairs}
    for k in range(args.rounds):
        for n, t in pairs:
            load = os.getloadavg()[0]
            result = one_run(args, n, t)
            rates[(n, t)]["learn"].append(result["learn_updates_per_s"])
            rates[(n, t)]["run"].append(result["run_updates_per_s"])
            print(json.dumps({"learners": n, "threads": t, "round": k, "load1": round(load, 2), **result}), flush=True)
    med = {p: {kind: statistics.median(v) for kind, v in r.items()} for p, r in rates.items()}
    first = pairs[0]
    print(f"\n{args.algo} on {args.env}, {args.steps} env steps, {args.rounds} runs each ({cores} cores)\n")
    print("| learners | threads each | updates/s learning | / first | updates/s of the run | / first |")
    print("|---:|---:|---:|---:|---:|---:|")
    for p in pairs:
        learn, run = med[p]["learn"], med[p]["run"]
        print(f"| {p[0]} | {p[1]} | {learn:.1f} | {learn / med[first]['learn']:.2f} | {run:.1f} | "
              f"{run / med[first]['run']:.2f} |")


if __name__ == "__main__":
    main()
