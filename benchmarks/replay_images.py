"""uint8 replay for Atari frames: memory and sample(32) time, relayrl against SB3's
``ReplayBuffer(optimize_memory_usage=True, handle_timeout_termination=False)``.

Both buffers are filled with the same stream: 8 envs stepping together, [4, 84, 84] uint8 frame
stacks made like Gymnasium's FrameStackObservation (reset padding), episodes of 50 to 500 steps,
random frames (content does not change memory: neither buffer compresses). Capacity CAP (default
50k) and the 1M figures scaled linearly from it (every per-item cost is proportional; fixed costs are
a few KB). Memory: bytes of the arrays the buffer holds (nbytes) and the process RSS growth while it
fills (pages touched). sample(32): median over rounds alternating relayrl and SB3, 200 calls each;
SB3's sample returns torch tensors made with ``torch.tensor`` (a copy), so its numpy gathers alone
are timed too. "add us/item" includes making the stream (the same for both).

    python benchmarks/replay_images.py [--capacity 50000]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np

ENVS, K, SIDE = 8, 4, 84


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def stream(steps: int, seed: int = 0):
    """Vector steps: (obs, next_obs, action, reward, done) with [ENVS, K, SIDE, SIDE] uint8 stacks."""
    rng = np.random.default_rng(seed)
    stacks = np.repeat(rng.integers(0, 256, (ENVS, 1, SIDE, SIDE), dtype=np.uint8), K, axis=1)
    left = rng.integers(50, 500, ENVS)
    for _ in range(steps):
        obs = stacks.copy()
        stacks = np.concatenate([stacks[:, 1:], rng.integers(0, 256, (ENVS, 1, SIDE, SIDE), dtype=np.uint8)], axis=1)
        nxt = stacks.copy()
        left -= 1
        done = left <= 0
        for i in np.flatnonzero(done):  # autoreset: a fresh stack of the reset frame
            stacks[i] = rng.integers(0, 256, (1, SIDE, SIDE), dtype=np.uint8)
            left[i] = rng.integers(50, 500)
        yield obs, nxt, rng.integers(0, 6, ENVS), rng.random(ENVS).astype(np.float32), done


def fill_relayrl(cap: int):
    from relayrl.data.replay import ReplayBuffer

    buf = ReplayBuffer(cap, layout="frames", seed=0)
    for obs, nxt, action, reward, done in stream(cap // ENVS + 100):
        buf.add({"obs": obs, "next_obs": nxt, "action": action, "reward": reward, "terminated": done,
                 "discount": np.full(ENVS, 0.99, np.float32)})
    return buf, buf.storage.nbytes


def fill_sb3(cap: int):
    import gymnasium as gym
    from stable_baselines3.common.buffers import ReplayBuffer

    buf = ReplayBuffer(cap, gym.spaces.Box(0, 255, (K, SIDE, SIDE), np.uint8), gym.spaces.Discrete(6), device="cpu",
                       n_envs=ENVS, optimize_memory_usage=True, handle_timeout_termination=False)
    infos = [{} for _ in range(ENVS)]
    for obs, nxt, action, reward, done in stream(cap // ENVS + 100):
        buf.add(obs, nxt, action[:, None], reward, done, infos)
    arrays = [buf.observations, buf.actions, buf.rewards, buf.dones, buf.timeouts]
    return buf, sum(a.nbytes for a in arrays)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    cap, scale = args.capacity, 1_000_000 / args.capacity
    rows = {}
    for name, fill in (("relayrl", fill_relayrl), ("sb3", fill_sb3)):
        before = rss_bytes()
        start = time.perf_counter()
        buf, nbytes = fill(cap)
        rows[name] = {"buf": buf, "nbytes": nbytes, "rss": rss_bytes() - before,
                      "fill_us": (time.perf_counter() - start) / (cap + 100 * ENVS) * 1e6}
    sb3 = rows["sb3"]["buf"]

    def sb3_gather(n: int = 32) -> None:  # SB3's two gathers without its torch.tensor copies
        rows_ = (np.random.randint(1, sb3.buffer_size, size=n) + sb3.pos) % sb3.buffer_size
        envs = np.random.randint(0, ENVS, size=n)
        sb3.observations[rows_, envs]
        sb3.observations[(rows_ + 1) % sb3.buffer_size, envs]

    samplers = {"relayrl": rows["relayrl"]["buf"].sample, "sb3": sb3.sample, "sb3 gather only": sb3_gather}
    times: dict[str, list[float]] = {name: [] for name in samplers}
    for _ in range(args.rounds):  # alternating
        for name, sample in samplers.items():
            start = time.perf_counter()
            for _ in range(200):
                sample(32)
            times[name].append((time.perf_counter() - start) / 200 * 1e6)
    print(f"capacity {cap} transitions, 1M figures scaled x{scale:g}")
    print(f"{'':10} {'nbytes 1M (GB)':>15} {'RSS 1M (GB)':>12} {'sample(32) us':>14} {'add us/item':>12}")
    for name, row in rows.items():
        print(f"{name:10} {row['nbytes'] * scale / 1e9:15.2f} {row['rss'] * scale / 1e9:12.2f} "
              f"{statistics.median(times[name]):14.1f} {row['fill_us']:12.2f}")
    print(f"{'sb3 gather only (numpy, no torch.tensor)':>41} sample(32) {statistics.median(times['sb3 gather only']):.1f} us")
    ours, peer = rows["relayrl"], rows["sb3"]
    print(f"memory sb3/relayrl: nbytes {peer['nbytes'] / ours['nbytes']:.2f}x, RSS {peer['rss'] / ours['rss']:.2f}x; "
          f"sample time relayrl/sb3 {statistics.median(times['relayrl']) / statistics.median(times['sb3']):.2f}")


if __name__ == "__main__":
    main()
