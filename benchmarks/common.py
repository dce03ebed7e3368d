"""Shared plumbing for the benchmarks that pit relayrl against a reference: each run in a fresh process,
results as JSON, and ``Comparison``, the main() they share (two sides run seed by seed, alternating, then a table).

A script keeps its docstring, its settings and its two ``Run`` functions, and ends with::

    if __name__ == "__main__":
        Comparison(__file__, __doc__, {"relayrl": run_ours, "sb3": run_sb3}, TimeToTarget(STOP),
                   seeds=[0, 1, 2, 3, 4], budget=20_000).main()
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Protocol

Run = Callable[[int, argparse.Namespace], dict]
"""One side of a comparison: ``run(seed, args)`` trains once in this process and returns a JSON-able dict."""


def launch(script: str, which: str, seed: int, *extra: str) -> dict:
    """Run ``script --child WHICH --seed SEED`` and return the dict it printed after ``RESULT ``."""
    proc = subprocess.run([sys.executable, script, "--child", which, "--seed", str(seed), *extra],
                          capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"{which} seed {seed} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def run_relayrl(algo: str, seed: int, budget: int, stop: float, eval_every: int, eval_episodes: int,
                env_id: str = "CartPole-v1", sets: tuple[str, ...] = ()) -> dict:
    """relayrl's default config for ``algo`` (plus ``sets``) until ``stop``; the time counts from
    the start of training (envs and model built) to the end of the evaluation that reached it."""
    import tempfile

    from relayrl.config import build_config
    from relayrl.training.trainer import run_trainer

    config = build_config(algo, None, [f"eval.freq={eval_every}", f"eval.episodes={eval_episodes}", *sets],
                          {"env.id": env_id, "seed": seed, "total_steps": budget, "stop_value": stop})
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_trainer(config, run_dir=tmp, tensorboard=False)
    return {"time_s": summary["time_to_stop_value_s"], "steps": summary["env_steps_to_stop_value"],
            "updates": summary["updates"]}


def sb3_learn_until(model, eval_env, budget: int, stop: float, eval_every_calls: int, eval_episodes: int) -> dict:
    """``model.learn`` with SB3's EvalCallback stopping at ``stop``; timed like ``run_relayrl``."""
    import time

    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

    solved: dict = {}

    class MarkSolved(StopTrainingOnRewardThreshold):
        def _on_step(self) -> bool:
            keep_going = super()._on_step()
            if not keep_going and not solved:
                solved.update(time=time.perf_counter(), steps=self.num_timesteps)
            return keep_going

    callback = EvalCallback(eval_env, callback_on_new_best=MarkSolved(reward_threshold=stop),
                            eval_freq=eval_every_calls, n_eval_episodes=eval_episodes, deterministic=True)
    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    return {"time_s": solved["time"] - start if solved else None, "steps": solved.get("steps"),
            "updates": model._n_updates}


def sb3_envs(env_id, seed: int, n_envs: int = 1) -> tuple:
    """SB3's training envs (``n_envs``, seeded ``seed``) and its one eval env (seeded ``seed + 10_000``)."""
    from stable_baselines3.common.env_util import make_vec_env

    return make_vec_env(env_id, n_envs=n_envs, seed=seed), make_vec_env(env_id, n_envs=1, seed=seed + 10_000)


class Table(Protocol):
    """How a comparison prints: a header (or None), a row per run as it ends, and a summary of all runs."""

    def header(self) -> str | None: ...

    def row(self, seed: int, which: str, result: dict) -> str: ...

    def summary(self, results: dict[str, list[dict]], args: argparse.Namespace) -> None: ...


class TimeToTarget:
    """Each run's time, env steps and updates to ``target``; then the medians and the ratio of the two sides."""

    def __init__(self, target: float):
        self.target = target

    def header(self) -> str:
        return f"{'seed':>4} {'library':>8} {f'time to {self.target:g} (s)':>16} {'env steps':>10} {'updates':>8}"

    def row(self, seed: int, which: str, result: dict) -> str:
        t = "not solved" if result["time_s"] is None else f"{result['time_s']:.2f}"
        return f"{seed:>4} {which:>8} {t:>16} {str(result['steps']):>10} {result['updates']:>8}"

    def summary(self, results: dict[str, list[dict]], args: argparse.Namespace) -> None:
        """With both sides run: the medians of time and env steps to the target (inf where a run missed it) and the
        ratio of the first side's median time to the second's."""
        if len(results) != 2:
            return

        def median(which: str, key: str) -> float:
            return statistics.median(r[key] if r[key] is not None else float("inf") for r in results[which])

        (first, second), target = list(results), self.target
        ours, peer = median(first, "time_s"), median(second, "time_s")
        print(f"\nmedian time to {target:g}: {first} {ours:.2f} s, {second} {peer:.2f} s, "
              f"ratio {first}/{second} {ours / peer:.3f}")
        print(f"median env steps to {target:g}: {first} {median(first, 'steps'):.0f}, "
              f"{second} {median(second, 'steps'):.0f}")


class Comparison:
    """The main() of a two-sided benchmark. ``sides`` maps a name (``--child`` and the table's "library") to its
    ``Run``, the first side being relayrl's; each run is a fresh process of ``script`` given ``--child NAME --seed
    N`` and the parent's own command line, so both sides see every option. Seeds alternate the sides (a load change
    hits both); the rows print as the runs end and ``table`` sums them up.

    The options every such script has: ``--seeds`` (default ``seeds``); ``--budget`` (env steps) where ``budget``
    is given; ``--set`` (repeatable relayrl options, ``args.sets``) where ``sets_help`` is; ``--only SIDE`` where
    ``only``; the script's own through ``options(parser)``."""

    def __init__(self, script: str, doc: str, sides: dict[str, Run], table: Table, *, seeds: list[int],
                 budget: int | None = None, budget_help: str | None = None, sets_help: str | None = None,
                 only: bool = False, options: Callable[[argparse.ArgumentParser], None] | None = None):
        if len(sides) != 2:
            raise ValueError(f"a comparison has two sides, got {list(sides)}")
        self.script, self.doc, self.sides, self.table = script, doc, sides, table
        self.seeds, self.budget, self.budget_help = seeds, budget, budget_help
        self.sets_help, self.only, self.options = sets_help, only, options

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(description=self.doc.splitlines()[0])
        parser.add_argument("--seeds", type=int, nargs="+", default=self.seeds)
        if self.budget is not None:
            parser.add_argument("--budget", type=int, default=self.budget, help=self.budget_help)
        if self.sets_help is not None:
            parser.add_argument("--set", dest="sets", action="append", default=[], help=self.sets_help)
        if self.options is not None:
            self.options(parser)
        if self.only:
            parser.add_argument("--only", choices=list(self.sides), help="run one side only")
        parser.add_argument("--child", choices=list(self.sides), help=argparse.SUPPRESS)
        parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
        return parser

    def main(self, argv: list[str] | None = None) -> dict[str, list[dict]] | None:
        """Run the comparison (or, as a child, one run); return each side's results, None in a child."""
        argv = sys.argv[1:] if argv is None else list(argv)
        args = self.parser().parse_args(argv)
        if args.child:
            print("RESULT " + json.dumps(self.sides[args.child](args.seed, args)))
            return None
        names = [args.only] if self.only and args.only else list(self.sides)
        results: dict[str, list[dict]] = {name: [] for name in names}
        header = self.table.header()
        if header is not None:
            print(header)
        for seed in args.seeds:
            for which in names:
                result = launch(self.script, which, seed, *argv)
                results[which].append(result)
                print(self.table.row(seed, which, result), flush=True)
        self.table.summary(results, args)
        return results


def sb3_same_cnn() -> type:
    """An SB3 features extractor that is relayrl's SmallCNN (MinAtar's encoder), so both libraries learn the same
    network (imports SB3 and torch when called)."""
    import gymnasium as gym
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    from relayrl.policy.encoders import SmallCNN

    class SameCNN(BaseFeaturesExtractor):
        def __init__(self, observation_space: gym.Space):
            cnn = SmallCNN(observation_space)
            super().__init__(observation_space, cnn.features)
            self.cnn = cnn

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.cnn(obs)

    return SameCNN
