"""examples/history_memory.py's memory (each frame once, the K-frame history rebuilt at sample time) against
relayrl's built-in ReplayBuffer storing the stacks ("plain" layout) and its "frames" layout: bytes per
transition and sample(256) time, on real MinAtar Breakout transitions (env.frame_stack=4: [10, 10, 16] stacks
as uint8, 8 envs interleaved, random actions, one-step transitions).

Bytes: the arrays each holds, allocated for CAPACITY transitions and filled with as many, divided by CAPACITY
(the history memory's frame ring is 1.25 frames per transition; its "used" figure counts the frames it wrote).
sample(256): median of ROUNDS rounds of 200 calls each, the three memories taking turns in each round.

    python -m benchmarks.history_memory [--capacity 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from examples.history_memory import ENV, K, HistoryMemory
from relayrl.data.replay import ReplayBuffer
from relayrl.envs.registry import make

ENVS = 8


def stream(transitions: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Vector steps of ENVS MinAtar envs (one-step transitions, envs interleaved), as a collector adds them."""
    envs = [make(ENV, frame_stack=K) for _ in range(ENVS)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.uint8)
    rng, steps = np.random.default_rng(seed), []
    for _ in range(transitions // ENVS):
        action = rng.integers(0, envs[0].action_space.n, ENVS)
        results = [env.step(int(a)) for env, a in zip(envs, action)]
        next_obs = np.stack([r[0] for r in results]).astype(np.uint8)
        terminated = np.array([r[2] for r in results], np.float32)
        steps.append({"obs": obs, "action": action.astype(np.int64), "reward": np.array([r[1] for r in results],
                      np.float32), "next_obs": next_obs, "terminated": terminated,
                      "discount": np.full(ENVS, 0.99, np.float32)})
        done = [r[2] or r[3] for r in results]
        obs = np.stack([env.reset()[0].astype(np.uint8) if d else n for env, d, n in zip(envs, done, next_obs)])
    return steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    steps = stream(args.capacity)
    env = make(ENV, frame_stack=K)
    history = HistoryMemory(capacity=args.capacity, observation_space=env.observation_space,
                            action_space=env.action_space, seed=0, batch_size=256)
    memories = {"stacks (ReplayBuffer, plain)": ReplayBuffer(args.capacity, layout="plain", seed=0),
                "frames layout (ReplayBuffer)": ReplayBuffer(args.capacity, layout="frames", seed=0),
                "history memory (example)": history}
    added = {}
    for name, memory in memories.items():
        start = time.perf_counter()
        for step in steps:
            memory.add(step)
        added[name] = (time.perf_counter() - start) / (len(steps) * ENVS) * 1e6
    held = {"stacks (ReplayBuffer, plain)": memories["stacks (ReplayBuffer, plain)"].storage.data.nbytes,
            "frames layout (ReplayBuffer)": memories["frames layout (ReplayBuffer)"].storage.nbytes,
            "history memory (example)": memories["history memory (example)"].nbytes()}
    times: dict[str, list[float]] = {name: [] for name in memories}
    for _ in range(args.rounds):
        for name, memory in memories.items():
            memory.sample(256)
            start = time.perf_counter()
            for _ in range(200):
                memory.sample(256)
            times[name].append((time.perf_counter() - start) / 200 * 1e3)
    stacked = 2 * steps[0]["obs"][0].nbytes
    print(f"{len(steps) * ENVS} transitions of {ENV} with frame_stack={K} ({steps[0]['obs'].shape[1:]} uint8 stacks, "
          f"{stacked} bytes of obs + next_obs), capacity {args.capacity}")
    print(f"{'memory':32s} {'bytes/transition':>17s} {'vs stacks':>10s} {'sample(256) ms':>15s} {'add us/item':>12s}")
    for name in memories:
        per = held[name] / args.capacity
        base = held["stacks (ReplayBuffer, plain)"] / args.capacity
        print(f"{name:32s} {per:17.0f} {per / base:10.3f} {statistics.median(times[name]):15.3f} {added[name]:12.1f}")
    print(f"history memory, frames written: {history.bytes_per_transition():.0f} bytes per transition used")


if __name__ == "__main__":
    main()
