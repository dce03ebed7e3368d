"""Cost as work grows: env steps/s per manager at 8-512 envs, PPO's collector against the raw vector env,
and PPO training steps/s as num_envs grows, with the numpy vector env as the ceiling (docs/benchmarks.md).

Three parts (``--part``; each well under 3 minutes on the 2-core machine):

- ``envs``: CartPole-v1 with random actions, env steps/s for 8, 32, 128, 512 envs on relayrl's sync,
  subproc, async (2 workers) and native managers, Gymnasium's SyncVectorEnv and AsyncVectorEnv (one
  process per env: up to 32), Gymnasium's numpy ``CartPoleVectorEnv`` stepped bare (the ceiling), and
  EnvPool's CartPole bare and under the native manager when the envpool extra is installed. The median
  of ``--env-reps`` timed windows of ``--seconds``, the columns alternating within each size.
- ``collect``: 32 envs; the raw rate (a bare loop of ``CartPoleVectorEnv.step`` + the PPO policy's
  ``act`` on the batch) against relayrl's ``OnPolicyCollector`` on the native manager, which adds the
  same-step autoreset, action checks, the rollout store, episode tracking and bootstrapping; and
  relayrl subproc(32) / sync(32) against Gymnasium's SyncVectorEnv(32), with what ``auto`` picks for a
  CartPole that may not go native. Alternating, median of ``--reps``. The raw and collector rates count
  this process's CPU seconds (both run in one thread), so other jobs on a shared machine cannot tilt the
  ratio; everything else is wall time.
- ``ppo``: PPO's default config on CartPole-v1, ``--ppo-steps`` env steps (collect + updates + one final
  evaluation), for num_envs 8, 16, 32, 64, on ``auto`` (native here) and ``sync``, median of
  ``--ppo-reps``, with the rate of the runs' collection phases alone (the trainer's ``time/collect_s``);
  beside them the raw collection rate at that size (vector env + policy act: the ceiling of
  what collection alone could reach) and the numpy vector env alone.

    python benchmarks/vector_scaling.py [--part envs|collect|ppo|all]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

from relayrl.envs import make_vec

SIZES = (8, 32, 128, 512)
ENV = "CartPole-v1"


def timed(step: Callable[[], int], seconds: float) -> float:
    """Steps per second of ``step`` (which returns the env steps it made) over about ``seconds``."""
    step()  # warm-up
    done, start = 0, time.perf_counter()
    while True:
        done += step()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def random_actions(n: int) -> Callable[[], np.ndarray]:
    table = np.random.default_rng(0).integers(0, 2, (64, n))
    i = [0]

    def draw() -> np.ndarray:
        i[0] = (i[0] + 1) & 63
        return table[i[0]]

    return draw


Stepper = tuple[Callable[[], int], Callable[[], None]]  # (one step: the env steps it made, close)


def relayrl_stepper(manager: str, n: int, **kw) -> Stepper:
    venv = make_vec(ENV, n, manager=manager, seed=0, **kw)
    draw = random_actions(n)
    if manager == "async":
        venv.send(draw())

        def step() -> int:
            result = venv.recv()
            venv.send(draw()[:len(result.env_ids)])
            return len(result.env_ids)
    else:
        def step() -> int:
            venv.step(draw())
            return n
    return step, venv.close


def native_envpool_stepper(n: int) -> Stepper:
    from relayrl.envs.native import NativeVectorEnv

    venv = NativeVectorEnv(ENV, n, source="envpool")
    venv.reset(seed=0)
    draw = random_actions(n)
    return (lambda: (venv.step(draw()), n)[1]), venv.close


def gym_stepper(env: gym.vector.VectorEnv, n: int, transitions: bool = False) -> Stepper:
    """Steps of a Gymnasium vector env; with ``transitions``, counting only the rows that carry one (its
    vector envs autoreset on the next step, whose rows for the envs that had just ended carry none and
    cost a reset, not a step)."""
    env.reset(seed=0)
    draw = random_actions(n)
    ended = [np.zeros(n, bool)]

    def step() -> int:
        _, _, terminated, truncated, _ = env.step(draw())
        if not transitions:
            return n
        real = n - int(np.count_nonzero(ended[0]))
        ended[0] = terminated | truncated
        return real

    return step, env.close


def rate_of(stepper: Stepper, seconds: float) -> float:
    step, close = stepper
    try:
        return timed(step, seconds)
    finally:
        close()


def numpy_vector(n: int) -> gym.vector.VectorEnv:
    return gym.make_vec(ENV, n, vectorization_mode="vector_entry_point")


def gym_sync(n: int) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([lambda: gym.make(ENV)] * n)


def envpool_raw(n: int) -> gym.vector.VectorEnv:
    import envpool

    return envpool.make_gymnasium(ENV, num_envs=n, seed=0)


def part_envs(seconds: float, workers: int, with_envpool: bool, reps: int) -> None:
    columns: dict[str, Callable[[int], Stepper | None]] = {
        "numpy CartPoleVectorEnv (bare)": lambda n: gym_stepper(numpy_vector(n), n),
        "relayrl native": lambda n: relayrl_stepper("native", n),
        "relayrl sync": lambda n: relayrl_stepper("sync", n),
        f"relayrl subproc ({workers}w)": lambda n: relayrl_stepper("subproc", n, workers=workers),
        f"relayrl async ({workers}w)": lambda n: relayrl_stepper("async", n, workers=workers),
        "gymnasium SyncVectorEnv": lambda n: gym_stepper(gym_sync(n), n),
        "gymnasium AsyncVectorEnv": lambda n: None if n > 32 else gym_stepper(
            gym.vector.AsyncVectorEnv([lambda: gym.make(ENV)] * n, shared_memory=True), n),
    }
    if with_envpool:
        columns["EnvPool (bare)"] = lambda n: gym_stepper(envpool_raw(n), n)
        columns["relayrl native on EnvPool"] = native_envpool_stepper
    table: dict[str, dict[int, float | None]] = {name: {} for name in columns}
    for n in SIZES:
        steppers = {name: build(n) for name, build in columns.items()}  # built once per size
        samples: dict[str, list[float]] = {name: [] for name in columns}
        try:
            for _ in range(reps):  # alternating, so a busy moment of the machine hits every column alike
                for name, stepper in steppers.items():
                    if stepper is not None:
                        samples[name].append(timed(stepper[0], seconds))
        finally:
            for stepper in steppers.values():
                if stepper is not None:
                    stepper[1]()
        for name, values in samples.items():
            table[name][n] = statistics.median(values) if values else None
            shown = "—" if table[name][n] is None else f"{table[name][n]:,.0f}"
            print(f"  x{n:<4} {name:<32} {shown:>12} steps/s", flush=True)
    print("\n| manager | " + " | ".join(f"{n} envs" for n in SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for name, row in table.items():
        cells = ["—" if row[n] is None else f"{row[n] / 1000:,.0f}k" for n in SIZES]
        print(f"| {name} | " + " | ".join(cells) + " |")


def ppo_policy():
    from relayrl.algos import get_algo
    from relayrl.config import build_config

    torch.manual_seed(0)
    cfg = build_config("ppo", None, []).ppo
    probe = gym.make(ENV)
    return get_algo("ppo").build_policy(cfg, probe.observation_space, probe.action_space), cfg


def raw_collect_rate(n: int, vector_steps: int, clock: Callable[[], float] = time.process_time) -> float:
    """A bare loop: the numpy vector env's step and the PPO policy's act on the batch, nothing else."""
    policy, _ = ppo_policy()
    env = numpy_vector(n)
    obs, _ = env.reset(seed=0)
    start = clock()
    for _ in range(vector_steps):
        obs = env.step(policy.act(obs, "collect").env_action)[0]
    return vector_steps * n / (clock() - start)


def collector_rate(n: int, vector_steps: int, manager: str = "native") -> float:
    from relayrl.training.collector import OnPolicyCollector

    policy, cfg = ppo_policy()
    with make_vec(ENV, n, manager=manager) as venv:
        collector = OnPolicyCollector(venv, policy, cfg.num_steps)
        collector.reset(0)
        rollouts = max(1, vector_steps // cfg.num_steps)
        start = time.process_time()
        for _ in range(rollouts):
            collector.collect()
        return rollouts * cfg.num_steps * n / (time.process_time() - start)


def part_collect(reps: int, seconds: float, workers: int) -> None:
    from relayrl.envs.auto import choose_manager

    n, steps = 32, 1280  # 20 rollouts of PPO's 64 steps
    ratios, raws, colls = [], [], []
    for _ in range(reps):
        raw, coll = raw_collect_rate(n, steps), collector_rate(n, steps)
        raws.append(raw), colls.append(coll), ratios.append(coll / raw)
        print(f"  raw {raw:,.0f} steps/s, collector on native {coll:,.0f} steps/s, ratio {coll / raw:.2f}", flush=True)
    print(f"PPO collection, CartPole x{n}: raw (vector env + policy act) {statistics.median(raws):,.0f} steps/s, "
          f"relayrl collector on native {statistics.median(colls):,.0f} steps/s, median ratio "
          f"{statistics.median(ratios):.2f} (goal >= 0.8)")
    sub, sync, gsync, gtrans = [], [], [], []
    for _ in range(reps):
        sub.append(rate_of(relayrl_stepper("subproc", n, workers=workers), seconds))
        sync.append(rate_of(relayrl_stepper("sync", n), seconds))
        gsync.append(rate_of(gym_stepper(gym_sync(n), n), seconds))
        gtrans.append(rate_of(gym_stepper(gym_sync(n), n, transitions=True), seconds))
    s, y, g, t = (statistics.median(x) for x in (sub, sync, gsync, gtrans))
    picked = choose_manager(ENV, n, workers=workers)[0]
    got = {"subproc": s, "sync": y}[picked]
    print(f"CartPole x{n} without native: relayrl subproc ({workers}w) {s:,.0f}, relayrl sync {y:,.0f}, "
          f"gymnasium SyncVectorEnv {g:,.0f} steps/s ({t:,.0f} transitions/s without its autoreset steps); "
          f"subproc/gym = {s / g:.2f}x, sync/gym = {y / g:.2f}x; auto (not native) picks {picked}: "
          f"{got / g:.2f}x gymnasium Sync per step, {got / t:.2f}x per transition")


def ppo_train_rate(n: int, manager: str, steps: int) -> tuple[float, float]:
    """(env steps per second of the whole run, env steps per second of its collection phases alone)."""
    import json
    import tempfile
    from pathlib import Path

    from relayrl import launch
    from relayrl.config import build_config

    config = build_config("ppo", None, [f"env.num_envs={n}", f"env.manager={manager}", "eval.freq=0",
                                        "eval.episodes=1", "eval.num_envs=1"], {"seed": 0, "total_steps": steps})
    with tempfile.TemporaryDirectory() as run_dir:
        summary = launch.run(config, run_dir=run_dir, tensorboard=False)
        events = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    collect_s = sum(e["time/collect_s"] for e in events if "time/collect_s" in e)
    return summary["env_steps"] / summary["wall_time_s"], summary["env_steps"] / collect_s


def part_ppo(steps: int, reps: int) -> None:
    rows = []
    for n in (8, 16, 32, 64):
        runs: dict[str, list[tuple[float, float]]] = {"auto": [], "sync": []}
        for _ in range(reps):  # alternating
            for manager in runs:
                runs[manager].append(ppo_train_rate(n, manager, steps))
        (auto, auto_collect), (sync, sync_collect) = (
            tuple(statistics.median(x[i] for x in runs[m]) for i in (0, 1)) for m in ("auto", "sync"))
        raw = raw_collect_rate(n, max(200, 20_000 // n), time.perf_counter)  # wall time, as the runs'
        bare = rate_of(gym_stepper(numpy_vector(n), n), 0.5)
        rows.append((n, auto, auto_collect, sync, sync_collect, raw, bare))
        print(f"  x{n}: PPO auto(native) {auto:,.0f} (collecting {auto_collect:,.0f}), PPO sync {sync:,.0f} "
              f"(collecting {sync_collect:,.0f}), raw collection {raw:,.0f}, numpy vector env {bare:,.0f} steps/s",
              flush=True)
    print("\n| num_envs | PPO train, auto (native) | its collection phases | PPO train, sync | its collection phases "
          "| raw collection (env + act) | numpy vector env |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, *figures in rows:
        print(f"| {n} | " + " | ".join(f"{x:,.0f}" for x in figures) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["envs", "collect", "ppo", "all"], default="all")
    parser.add_argument("--seconds", type=float, default=0.3, help="timed window per env-throughput sample")
    parser.add_argument("--env-reps", type=int, default=3, help="env-throughput samples per figure (median)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ppo-steps", type=int, default=16_384)
    parser.add_argument("--ppo-reps", type=int, default=3)
    parser.add_argument("--no-envpool", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)  # what the trainer uses for vector observations (config threads: null)
    from relayrl.envs.native import envpool_ids

    if args.part in ("envs", "all"):
        part_envs(args.seconds, args.workers, bool(envpool_ids()) and not args.no_envpool, args.env_reps)
    if args.part in ("collect", "all"):
        part_collect(args.reps, args.seconds, args.workers)
    if args.part in ("ppo", "all"):
        part_ppo(args.ppo_steps, args.ppo_reps)


if __name__ == "__main__":
    main()
