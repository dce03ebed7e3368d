"""Replay buffer speed: relayrl against Stable-Baselines3 and Tianshou (each if installed).

1M transitions of a 17-float observation and a 6-float action (random values in every buffer):
add one at a time and in chunks of 256 (per-item cost), uniform sample(256), and prioritized
sample(256) + update_priorities(256). Every buffer is built and filled first; then the operations
run in rounds, each round timing every library in turn (this machine's speed drifts, so the ratios
are taken within a round). Printed: the median over rounds of each timing, and for the sampling
operations the median over rounds of fastest peer / relayrl.

    pip install -c constraints.txt -e '.[bench]'      # SB3 and Tianshou
    python benchmarks/replay.py --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np

OBS, ACT, CAP, BATCH = 17, 6, 1_000_000, 256
ADD1, ADD256, SAMPLES, PRIORITIZED = "add x1 (us/item)", "add x256 (us/item)", "sample(256) (us)", "prioritized sample+update (us)"
OPS = (ADD1, ADD256, SAMPLES, PRIORITIZED)


def per_call(fn: Callable[[], None], calls: int, items: int = 1) -> float:
    """Microseconds per item of ``calls`` calls of ``fn``."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / (calls * items) * 1e6


def chunk(n: int, rng) -> dict:
    return {"obs": rng.random((n, OBS), dtype=np.float32), "action": rng.random((n, ACT), dtype=np.float32),
            "reward": rng.random(n, dtype=np.float32), "next_obs": rng.random((n, OBS), dtype=np.float32),
            "terminated": rng.random(n) < 0.01}


def relayrl_ops(rng) -> dict[str, Callable[[], float]]:
    from relayrl.data.replay import ReplayBuffer

    buf = ReplayBuffer(CAP, seed=0)
    pbuf = ReplayBuffer(CAP, sampler="prioritized", seed=0)
    for _ in range(CAP // 100_000):
        data = chunk(100_000, rng)
        buf.add(data)
        pbuf.add(data)
    adds = ReplayBuffer(CAP, seed=0)
    one, big = chunk(1, rng), chunk(BATCH, rng)
    prio = rng.random(BATCH) + 0.1

    def prioritized():
        sample = pbuf.sample(BATCH)
        pbuf.update_priorities(sample["index"], prio)

    return {ADD1: lambda: per_call(lambda: adds.add(one), 5000),
            ADD256: lambda: per_call(lambda: adds.add(big), 200, BATCH),
            SAMPLES: lambda: per_call(lambda: buf.sample(BATCH), 200),
            PRIORITIZED: lambda: per_call(prioritized, 200)}


def sb3_ops(rng) -> dict[str, Callable[[], float]] | None:
    try:
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer
    except ImportError:
        return None
    buf = SB3Buffer(CAP, gym.spaces.Box(-1, 1, (OBS,), np.float32), gym.spaces.Box(-1, 1, (ACT,), np.float32),
                    device="cpu", n_envs=1, optimize_memory_usage=False)
    for start in range(0, CAP, 100_000):  # its arrays, filled as its add would (faster than 1M adds)
        data = chunk(100_000, rng)
        rows = slice(start, start + 100_000)
        buf.observations[rows, 0], buf.next_observations[rows, 0] = data["obs"], data["next_obs"]
        buf.actions[rows, 0], buf.rewards[rows, 0], buf.dones[rows, 0] = data["action"], data["reward"], data["terminated"]
    buf.pos, buf.full = 0, True
    o, a = rng.random((1, OBS), dtype=np.float32), rng.random((1, ACT), dtype=np.float32)
    r, d = np.zeros(1, np.float32), np.zeros(1, np.float32)
    return {ADD1: lambda: per_call(lambda: buf.add(o, o, a, r, d, [{}]), 5000),
            SAMPLES: lambda: per_call(lambda: buf.sample(BATCH), 200)}  # no chunked add, no prioritized buffer


def tianshou_ops(rng) -> dict[str, Callable[[], float]] | None:
    try:
        from tianshou.data import Batch, PrioritizedReplayBuffer
        from tianshou.data import ReplayBuffer as TSBuffer
    except ImportError:
        return None

    def item():
        return Batch(obs=rng.random(OBS, dtype=np.float32), act=rng.random(ACT, dtype=np.float32), rew=0.0,
                     terminated=False, truncated=False, obs_next=rng.random(OBS, dtype=np.float32), info={})

    buf = TSBuffer(CAP)
    while len(buf) < CAP:  # its single buffer adds one transition at a time (about a minute)
        buf.add(item())
    pbuf = PrioritizedReplayBuffer(CAP, alpha=0.6, beta=0.4)
    pbuf.update(buf)  # a whole buffer copied in, every item at the initial priority
    one = item()
    prio = rng.random(BATCH) + 0.1

    def prioritized():
        _, index = pbuf.sample(BATCH)
        pbuf.update_weight(index, prio)

    return {ADD1: lambda: per_call(lambda: buf.add(one), 5000),
            SAMPLES: lambda: per_call(lambda: buf.sample(BATCH), 200),
            PRIORITIZED: lambda: per_call(prioritized, 200)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    libraries = {"relayrl": relayrl_ops(rng), "SB3": sb3_ops(rng), "Tianshou": tianshou_ops(rng)}
    libraries = {name: ops for name, ops in libraries.items() if ops is not None}
    times: dict[str, dict[str, list[float]]] = {name: {op: [] for op in ops} for name, ops in libraries.items()}
    for _ in range(args.rounds):
        for op in OPS:
            for name, ops in libraries.items():
                if op in ops:
                    times[name][op].append(ops[op]())
    names = list(libraries)
    print(f"{'operation, median of ' + str(args.rounds) + ' rounds':<34}" + "".join(f"{n:>12}" for n in names))
    for op in OPS:
        cells = [statistics.median(times[n][op]) if op in times[n] else float("nan") for n in names]
        print(f"{op:<34}" + "".join(f"{c:>12.2f}" for c in cells))
    for op in (SAMPLES, PRIORITIZED):
        peers = [n for n in names[1:] if op in times[n]]
        if peers:
            ratios = [min(times[n][op][i] for n in peers) / times["relayrl"][op][i] for i in range(args.rounds)]
            print(f"{op}: fastest peer ({', '.join(peers)}) / relayrl, per round: "
                  f"median {statistics.median(ratios):.2f}x, range {min(ratios):.2f}-{max(ratios):.2f}x")


if __name__ == "__main__":
    main()
