"""The id-keyed env manager (envs/keyed.py, DI-engine's interface) against the array interface it views.

CartPole-v1, 8 envs, random actions drawn before timing, sync and subproc (2 workers). Each round times three
blocks of ``--steps`` env steps on one vector env built once (the keyed manager is ``EnvManager.over`` it,
launched with seed 0): ``venv.step(actions)`` (the array interface); the same with {env_id: obs} built to
read, the actions gathered from {env_id: action} and each result scattered into {env_id: Timestep}, the least
any id-keyed interface does (the inherent cost); and
``manager.step({env_id: action})`` reading ``manager.ready_obs`` as DI-engine's loop does. Each block goes first
in turn; ``--rounds`` rounds; figures are medians, the ratio is of the medians (and the median of the per-round
ratios).

    python benchmarks/keyed_manager.py [--steps 40000] [--rounds 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from functools import partial
from itertools import repeat

import numpy as np

from relayrl.envs import make_vec
from relayrl.envs.keyed import EnvManager, Timestep

NUM_ENVS = 8
_timestep = partial(tuple.__new__, Timestep)


def array_block(venv, actions: np.ndarray) -> float:
    start = time.perf_counter()
    for row in actions:
        venv.step(row)
    return actions.size / (time.perf_counter() - start)


def floor_block(venv, actions: list[dict[int, int]]) -> float:
    """The least an id-keyed interface does around the array step in DI-engine's loop: {env_id: obs} to read,
    one gather of {env_id: action} into an array, and one scatter into {env_id: Timestep} of per-env
    observation views (DI-engine's users get per-env objects): the inherent cost, without the manager's
    states, episode counts, final observations and checks."""
    ids = list(range(NUM_ENVS))
    obs = list(venv.reset(seed=0))
    start = time.perf_counter()
    for row in actions:
        dict(zip(ids, obs))  # the {env_id: obs} a policy reads
        r = venv.step(np.asarray([row[i] for i in ids]))
        obs = list(r.obs)
        dict(zip(ids, map(_timestep, zip(obs, r.reward.tolist(), r.terminated.tolist(), r.truncated.tolist(),
                                          repeat(False), r.info, repeat(None)))))
    return len(actions) * NUM_ENVS / (time.perf_counter() - start)


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
        rates: dict[str, list[float]] = {"array": [], "floor": [], "keyed": []}
        blocks = {"array": lambda: array_block(venv, actions), "floor": lambda: floor_block(venv, keyed_actions),
                  "keyed": lambda: keyed_block(manager, keyed_actions)}
        order = list(blocks)
        for r in range(rounds):
            for name in order[r % 3:] + order[:r % 3]:  # each side first in turn
                rates[name].append(blocks[name]())
    array, floor, keyed = (statistics.median(rates[name]) for name in ("array", "floor", "keyed"))
    return {"manager": manager_name, "num_envs": NUM_ENVS, "steps_per_block": actions.size, "rounds": rounds,
            "array_steps_per_s": array, "floor_steps_per_s": floor, "keyed_steps_per_s": keyed,
            "ratio": keyed / array, "floor_ratio": floor / array,
            "median_round_ratio": statistics.median(k / a for k, a in zip(rates["keyed"], rates["array"])),
            "keyed_extra_us_per_step": 1e6 * NUM_ENVS * (1 / keyed - 1 / array),
            "inherent_us_per_step": 1e6 * NUM_ENVS * (1 / floor - 1 / array), "rates": rates}


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
              f"{res['keyed_steps_per_s']:>9,.0f} steps/s   keyed / array = {res['ratio']:.2f}x (median of rounds "
              f"{res['median_round_ratio']:.2f}x); per vector step the keyed side costs "
              f"+{res['keyed_extra_us_per_step']:.1f} µs, of which the dicts alone (obs, gather, timesteps) "
              f"+{res['inherent_us_per_step']:.1f} µs (array + dicts: {res['floor_ratio']:.2f}x)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
