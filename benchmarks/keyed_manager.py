"""The id-keyed env manager (envs/keyed.py, DI-engine's interface) against the array interface it views.

CartPole-v1, 8 envs, random actions drawn before timing, sync and subproc (2 workers). Each round times both
sides on one manager built once (the keyed one is ``EnvManager.over`` the same vector env, launched): a block of
``--steps`` env steps through ``venv.step(actions)``, then one through ``manager.step({env_id: action})`` reading
``manager.ready_obs`` as DI-engine's loop does, alternating which goes first; ``--rounds`` rounds, the figure is
the median of each side and the ratio of the medians (also the median of the per-round ratios). Also the keyed
side's cost per env and step over the array side's (µs).

    python benchmarks/keyed_manager.py [--steps 40000] [--rounds 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from relayrl.envs import make_vec
from relayrl.envs.keyed import EnvManager

NUM_ENVS = 8


def array_block(venv, actions: np.ndarray) -> float:
    start = time.perf_counter()
    for row in actions:
        venv.step(row)
    return actions.size / (time.perf_counter() - start)


def keyed_block(manager: EnvManager, actions: list[dict[int, int]]) -> float:
    start = time.perf_counter()
    for row in actions:
        manager.ready_obs  # noqa: B018 (what a policy reads each step)
        manager.step(row)
    return len(actions) * NUM_ENVS / (time.perf_counter() - start)


def measure(manager_name: str, steps: int, rounds: int, workers: int) -> dict:
    kw = {"workers": workers} if manager_name != "sync" else {}
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, (steps // NUM_ENVS, NUM_ENVS))
    keyed_actions = [dict(enumerate(row.tolist())) for row in actions]
    with make_vec("CartPole-v1", NUM_ENVS, manager=manager_name, seed=0, **kw) as venv:
        manager = EnvManager.over(venv)
        manager.seed(0)
        manager.launch()
        array_block(venv, actions[:200])  # warm-up of both paths
        keyed_block(manager, keyed_actions[:200])
        array_rates, keyed_rates = [], []
        for r in range(rounds):
            if r % 2:
                keyed_rates.append(keyed_block(manager, keyed_actions))
                array_rates.append(array_block(venv, actions))
            else:
                array_rates.append(array_block(venv, actions))
                keyed_rates.append(keyed_block(manager, keyed_actions))
    array, keyed = statistics.median(array_rates), statistics.median(keyed_rates)
    return {"manager": manager_name, "num_envs": NUM_ENVS, "steps_per_block": actions.size, "rounds": rounds,
            "array_steps_per_s": array, "keyed_steps_per_s": keyed, "ratio": keyed / array,
            "median_round_ratio": statistics.median(k / a for k, a in zip(keyed_rates, array_rates)),
            "keyed_extra_us_per_env_step": 1e6 * (1 / keyed - 1 / array),
            "array_rates": array_rates, "keyed_rates": keyed_rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000, help="env steps per timed block")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    results = []
    for name in ("sync", "subproc"):
        res = measure(name, args.steps, args.rounds, args.workers)
        results.append(res)
        print(f"CartPole-v1 x{NUM_ENVS} {name:<8} array {res['array_steps_per_s']:>9,.0f} steps/s   keyed "
              f"{res['keyed_steps_per_s']:>9,.0f} steps/s   keyed / array = {res['ratio']:.2f}x "
              f"(median of rounds {res['median_round_ratio']:.2f}x; +{res['keyed_extra_us_per_env_step']:.2f} µs "
              "per env step)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
