"""PQN on MinAtar against Stable-Baselines3 DQN: relayrl's PQN at its defaults (``--settings defaults``, what
``relayrl train pqn --env MinAtar/Breakout-v1`` runs) or with purejaxql's MinAtar settings (``--settings
purejaxql``, scaled to a CPU's env count) against SB3's DQN as benchmarks/minatar_bench.py runs it (MinAtar's small
CNN, DQN settings).

Both train on relayrl's ``MinAtar/<Game>-v1`` env and evaluate ``--eval-episodes`` deterministic episodes every
``--eval-every`` env steps; a run's curve is (env steps, wall time since training began, eval mean return). The
table gives, for a target return both reach (``--target``, else the highest return every run reached), the median
wall time and env steps to it and the ratio relayrl / SB3. Each run is a fresh process, alternating seed by seed.

PQN's network is the same small CNN (relayrl's built-in encoder for MinAtar's planes) with a LayerNorm head of
128. From purejaxql's pqn_minatar.yaml: 32 steps per env, 2 epochs, lr 5e-4 decayed linearly, lambda 0.65,
epsilon 1 -> 0.05 over the first 10% of the run; its 128 envs and 32 minibatches are 32 envs and 8 minibatches
here (minibatches of 128 steps, as there), a CPU's worth of env stepping. On Breakout at 100k steps they learned
less than PQN's defaults (benchmarks/image_defaults.py; docs/benchmarks.md, "Defaults by observation kind").

    python benchmarks/pqn_minatar.py --game Breakout --seeds 0 1 2 --steps 100000 --eval-every 10000
    python benchmarks/pqn_minatar.py --settings purejaxql --steps 1000000
"""

from __future__ import annotations

import argparse

from common import Comparison
from minatar_bench import Curves, curve_options, relayrl_curve, sb3_curve

PQN = {"env.num_envs": 32, "pqn.num_steps": 32, "pqn.epochs": 2, "pqn.minibatches": 8, "pqn.lr": 5e-4,
       "pqn.anneal_lr": True, "pqn.gamma": 0.99, "pqn.lam": 0.65, "pqn.grad_clip": 10.0, "pqn.epsilon_start": 1.0,
       "pqn.epsilon_end": 0.05, "pqn.hidden_sizes": [128]}


def run_relayrl(seed: int, args: argparse.Namespace) -> dict:
    if args.settings == "defaults":
        return relayrl_curve("pqn", {}, seed, args)
    return relayrl_curve("pqn", {**PQN, "pqn.epsilon_decay_steps": max(1, args.steps // 10)}, seed, args)


def options(parser: argparse.ArgumentParser) -> None:
    curve_options(100_000, 10_000)(parser)
    parser.add_argument("--settings", choices=["defaults", "purejaxql"], default="defaults",
                        help="relayrl PQN's own defaults, or purejaxql's MinAtar settings")


def run_sb3(seed: int, args: argparse.Namespace) -> dict:
    return sb3_curve("dqn", seed, args)


if __name__ == "__main__":
    Comparison(__file__, __doc__, {"relayrl": run_relayrl, "sb3": run_sb3},
               Curves(lambda args: f"PQN ({args.settings}) vs SB3 DQN on MinAtar/{args.game}-v1, seeds {args.seeds}"),
               seeds=[0, 1, 2], options=options).main()
