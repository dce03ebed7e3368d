"""PQN on MinAtar against Stable-Baselines3 DQN: relayrl's PQN with purejaxql's MinAtar settings (scaled to a
CPU's env count) against SB3's DQN as benchmarks/minatar_bench.py runs it (MinAtar's small CNN, DQN settings).

Both train on relayrl's ``MinAtar/<Game>-v1`` env and evaluate ``--eval-episodes`` deterministic episodes every
``--eval-every`` env steps; a run's curve is (env steps, wall time since training began, eval mean return). The
table gives, for a target return both reach (``--target``, else the highest return every run reached), the median
wall time and env steps to it and the ratio relayrl / SB3. Each run is a fresh process, alternating seed by seed.

PQN's network is the same small CNN (relayrl's built-in encoder for MinAtar's planes) with a LayerNorm head of
128. From purejaxql's pqn_minatar.yaml: 32 steps per env, 2 epochs, lr 5e-4 decayed linearly, lambda 0.65,
epsilon 1 -> 0.05 over the first 10% of the run; its 128 envs and 32 minibatches are 32 envs and 8 minibatches
here (minibatches of 128 steps, as there), a CPU's worth of env stepping.

    python benchmarks/pqn_minatar.py --game Breakout --seeds 0 1 2 --steps 1000000
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import launch
from minatar_bench import plot, run_sb3, summarise

PQN = {"env.num_envs": 32, "pqn.num_steps": 32, "pqn.epochs": 2, "pqn.minibatches": 8, "pqn.lr": 5e-4,
       "pqn.anneal_lr": True, "pqn.gamma": 0.99, "pqn.lam": 0.65, "pqn.grad_clip": 10.0, "pqn.epsilon_start": 1.0,
       "pqn.epsilon_end": 0.05, "pqn.hidden_sizes": [128]}


def run_relayrl(game: str, seed: int, steps: int, eval_every: int, episodes: int) -> dict:
    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    sets = {**PQN, "pqn.epsilon_decay_steps": max(1, steps // 10), "eval.freq": eval_every,
            "eval.episodes": episodes, "eval.num_envs": 1}
    config = build_config("pqn", None, [f"{k}={json.dumps(v)}" for k, v in sets.items()],
                          {"env.id": f"MinAtar/{game}-v1", "seed": seed, "total_steps": steps})
    with tempfile.TemporaryDirectory() as tmp:
        run_trainer(config, run_dir=tmp, tensorboard=False, quiet=True)
        events = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    return {"curve": [(e["env_steps"], e["wall_time_s"], e["eval/return_mean"]) for e in events
                      if e["event"] == "eval"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=50_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument("--plot", default=None, help="write the curves to this PNG")
    parser.add_argument("--json", default=None, help="write the raw curves to this file")
    parser.add_argument("--child", choices=["relayrl", "sb3"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        shared = (args.seed, args.steps, args.eval_every, args.eval_episodes)
        out = run_relayrl(args.game, *shared) if args.child == "relayrl" else run_sb3("dqn", args.game, *shared)
        print("RESULT " + json.dumps(out))
        return
    extra = ["--game", args.game, "--steps", str(args.steps), "--eval-every", str(args.eval_every),
             "--eval-episodes", str(args.eval_episodes)]
    results: dict[str, list[dict]] = {"relayrl": [], "sb3": []}
    for seed in args.seeds:
        for which in ("relayrl", "sb3"):
            r = launch(__file__, which, seed, *extra)
            results[which].append(r)
            last = r["curve"][-1]
            print(f"seed {seed} {which:>8}: {last[0]} env steps in {last[1]:.1f} s, final eval {last[2]:.2f}, "
                  f"best {max(x[2] for x in r['curve']):.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results))
    summarise(results, args.target)
    if args.plot:
        plot(results, f"PQN vs SB3 DQN on MinAtar/{args.game}-v1, seeds {args.seeds}", args.plot)


if __name__ == "__main__":
    main()
