"""A memory task: recurrent PPO against feed-forward PPO on CartPole-v1 without its velocities.

``relayrl/CartPoleNoVel-v1`` observes the cart position and the pole angle only, so the policy
must infer the velocities from what it has seen. Both policies get the same budget, seeds, PPO
settings and evaluation (10 deterministic episodes every EVAL_EVERY env steps); a run stops at an
eval mean of 400. Each run is its own process, and its run directory is kept for plotting::

    python benchmarks/recurrent_memory.py --seeds 0 1 2
    relayrl plot runs/recurrent_memory/gru_seed0 runs/recurrent_memory/mlp_seed0 -o curve.png

``relayrl plot`` labels a run by algorithm, recurrent kind and env (``ppo (gru) ENV``, ``ppo ENV``
for the MLP), so each policy kind gets its own curve, its seeds averaged into a mean and a band;
``--plot`` draws that figure for every run of this script.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from common import launch

ENV = "relayrl/CartPoleNoVel-v1"
STOP = 400.0
EVAL_EVERY = 5_000
COMMON = ("eval.episodes=10", "env.manager=sync")
RECURRENT = ("ppo.recurrent_hidden=64", "ppo.hidden_sizes=[64]", "ppo.seq_len=16", "ppo.batch_trajectories=16")
POLICIES = {
    "gru": ("ppo.recurrent=gru", *RECURRENT),
    "lstm": ("ppo.recurrent=lstm", *RECURRENT),
    "mlp": (),  # the default feed-forward PPO
}


def child(args: argparse.Namespace) -> None:
    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    config = build_config("ppo", None, [f"eval.freq={EVAL_EVERY}", *COMMON, *POLICIES[args.child]],
                          {"env.id": ENV, "seed": args.seed, "total_steps": args.budget, "stop_value": STOP})
    summary = run_trainer(config, run_dir=Path(args.out) / f"{args.child}_seed{args.seed}", tensorboard=False)
    print("RESULT " + json.dumps({
        "time_s": summary["time_to_stop_value_s"], "steps": summary["env_steps_to_stop_value"],
        "best": summary["best_eval_return"], "env_steps": summary["env_steps"],
        "wall_s": summary["wall_time_s"], "updates": summary["updates"]}))


def plot(run_dirs: dict[str, list[Path]], output: Path) -> None:
    """``relayrl plot`` on all runs (its labels already tell the policy kinds apart)."""
    from relayrl.io.plot import plot_runs

    plot_runs([d for dirs in run_dirs.values() for d in dirs], output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=100_000, help="env steps per run")
    parser.add_argument("--out", default="runs/recurrent_memory", help="folder for the run directories")
    parser.add_argument("--plot", default=None, help="write the learning curves here (e.g. docs/img/...png)")
    parser.add_argument("--child", choices=sorted(POLICIES), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    extra = ["--budget", str(args.budget), "--out", args.out]
    results: dict[str, list[dict]] = {name: [] for name in POLICIES}
    print(f"{'seed':>4} {'policy':>6} {'time to 400 (s)':>16} {'steps to 400':>13} {'best eval':>10} "
          f"{'env steps':>10} {'wall (s)':>9}")
    for seed in args.seeds:
        for name in POLICIES:
            r = launch(__file__, name, seed, *extra)
            results[name].append(r)
            t = "not reached" if r["time_s"] is None else f"{r['time_s']:.1f}"
            print(f"{seed:>4} {name:>6} {t:>16} {str(r['steps']):>13} {r['best']:>10.1f} {r['env_steps']:>10} "
                  f"{r['wall_s']:>9.1f}", flush=True)
    for name, rs in results.items():
        reached = [r for r in rs if r["time_s"] is not None]
        line = f"{name}: reached {STOP:g} in {len(reached)}/{len(rs)} runs"
        if reached:
            line += (f", median {statistics.median(r['steps'] for r in reached):.0f} steps, "
                     f"{statistics.median(r['time_s'] for r in reached):.1f} s")
        print(line + f"; best eval median {statistics.median(r['best'] for r in rs):.1f}")
    if args.plot:
        plot({name: [Path(args.out) / f"{name}_seed{s}" for s in args.seeds] for name in POLICIES}, Path(args.plot))
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
