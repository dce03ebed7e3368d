"""A one-agent simulator for the turn-counting test: at its k-th turn it reports observation [k] and
expects the trainer's action [k] back; anything else is a lost or doubled turn (exit 4)."""

from __future__ import annotations

import sys

import numpy as np

from relayrl.bridge.world import CLOSED, World


def main() -> int:
    world = World(timeout_s=30)
    world.register("count", 1, [(1,)], continuous=1)
    k = 0
    obs, ids, reward = np.zeros((1, 1), np.float32), np.zeros(1, np.int64), np.zeros(1, np.float32)
    while True:
        obs[0, 0] = k
        world.set_decisions("count", ids, [obs], reward)
        if world.step() == CLOSED:
            print(f"counter_sim: {k} turns", file=sys.stderr)
            return 0
        _, continuous, _ = world.action_arrays("count")
        if continuous[0, 0] != k:
            print(f"counter_sim: turn {k} got action {continuous[0, 0]}", file=sys.stderr)
            return 4
        k += 1


if __name__ == "__main__":
    sys.exit(main())
