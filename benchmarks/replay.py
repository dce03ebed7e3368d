"""Replay buffer speed: relayrl against Stable-Baselines3 and (if installed) Tianshou.

1M transitions of a 17-float observation and a 6-float action: add in chunks of 1 (first 100k
only, then scaled: per-item cost is what it measures) and of 256, uniform sample(256), and
prioritized sample(256) + update_priorities(256). Median of 5 timings of each operation batch.

    pip install -c constraints.txt -e '.[bench]'      # SB3; Tianshou is optional
    python benchmarks/replay.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

OBS, ACT, CAP = 17, 6, 1_000_000


def timed(fn, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def chunk(n: int, rng) -> dict:
    return {"obs": rng.random((n, OBS), dtype=np.float32), "action": rng.random((n, ACT), dtype=np.float32),
            "reward": rng.random(n, dtype=np.float32), "next_obs": rng.random((n, OBS), dtype=np.float32),
            "terminated": np.zeros(n, bool)}


def bench_relayrl(rng) -> dict[str, float]:
    from relayrl.data.replay import ReplayBuffer

    out = {}
    one = chunk(1, rng)
    buf = ReplayBuffer(CAP, seed=0)
    out["add x1 (us/item)"] = timed(lambda: [buf.add(one) for _ in range(10_000)], 3) / 10_000 * 1e6
    big = chunk(256, rng)
    out["add x256 (us/item)"] = timed(lambda: [buf.add(big) for _ in range(400)], 3) / (400 * 256) * 1e6
    while len(buf) < CAP:
        buf.add(chunk(100_000, rng))
    out["sample(256) (us)"] = timed(lambda: [buf.sample(256) for _ in range(200)]) / 200 * 1e6
    pbuf = ReplayBuffer(CAP, sampler="prioritized", seed=0)
    for _ in range(10):
        pbuf.add(chunk(100_000, rng))
    prio = rng.random(256) + 0.1

    def per_step():
        for _ in range(100):
            s = pbuf.sample(256)
            pbuf.update_priorities(s["index"], prio)

    out["prioritized sample+update (us)"] = timed(per_step) / 100 * 1e6
    return out


def bench_sb3(rng) -> dict[str, float]:
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer

    obs_space = gym.spaces.Box(-1, 1, (OBS,), np.float32)
    act_space = gym.spaces.Box(-1, 1, (ACT,), np.float32)
    out = {}
    buf = SB3Buffer(CAP, obs_space, act_space, device="cpu", n_envs=1, optimize_memory_usage=False)
    o, a = rng.random((1, OBS), dtype=np.float32), rng.random((1, ACT), dtype=np.float32)
    r, d = np.zeros(1, np.float32), np.zeros(1, np.float32)
    out["add x1 (us/item)"] = timed(lambda: [buf.add(o, o, a, r, d, [{}]) for _ in range(10_000)], 3) / 10_000 * 1e6
    out["add x256 (us/item)"] = float("nan")  # SB3's add takes one step of n_envs rows
    buf.pos, buf.full = 0, True
    out["sample(256) (us)"] = timed(lambda: [buf.sample(256) for _ in range(200)]) / 200 * 1e6
    out["prioritized sample+update (us)"] = float("nan")  # SB3 has no prioritized buffer
    return out


def bench_tianshou(rng) -> dict[str, float] | None:
    try:
        from tianshou.data import Batch, PrioritizedReplayBuffer
        from tianshou.data import ReplayBuffer as TSBuffer
    except ImportError:
        return None
    out = {}

    def item():
        return Batch(obs=rng.random(OBS, dtype=np.float32), act=rng.random(ACT, dtype=np.float32), rew=0.0,
                     terminated=False, truncated=False, obs_next=rng.random(OBS, dtype=np.float32), info={})

    buf = TSBuffer(CAP)
    one = item()
    out["add x1 (us/item)"] = timed(lambda: [buf.add(one) for _ in range(10_000)], 3) / 10_000 * 1e6
    out["add x256 (us/item)"] = float("nan")  # Tianshou's single buffer adds one transition at a time
    while len(buf) < CAP:  # fill to 1M like the others (about 20 s)
        buf.add(one)
    out["sample(256) (us)"] = timed(lambda: [buf.sample(256) for _ in range(200)]) / 200 * 1e6
    pbuf = PrioritizedReplayBuffer(CAP, alpha=0.6, beta=0.4)
    while len(pbuf) < CAP:
        pbuf.add(one)
    prio = rng.random(256) + 0.1

    def per_step():
        for _ in range(100):
            _, index = pbuf.sample(256)
            pbuf.update_weight(index, prio)

    out["prioritized sample+update (us)"] = timed(per_step) / 100 * 1e6
    return out


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    rng = np.random.default_rng(0)
    results = {"relayrl": bench_relayrl(rng), "SB3": bench_sb3(rng)}
    ts = bench_tianshou(rng)
    if ts is not None:
        results["Tianshou"] = ts
    names = list(results)
    print(f"{'operation':<34}" + "".join(f"{n:>12}" for n in names))
    for op in results["relayrl"]:
        print(f"{op:<34}" + "".join(f"{results[n][op]:>12.2f}" for n in names))
    for op in ("sample(256) (us)", "prioritized sample+update (us)"):
        peers = [results[n][op] for n in names[1:] if np.isfinite(results[n][op])]
        if peers:
            print(f"{op}: fastest peer / relayrl = {min(peers) / results['relayrl'][op]:.2f}x")


if __name__ == "__main__":
    main()
