"""A scene with two behaviours, each its own kind of agent and action (ML-Agents scenes often have several):

    relayrl train ppo --env "bridge:python -m relayrl.bridge.examples.two_behaviours"

- "ball": the 3DBall platforms of ``ball3d.py`` (observation of 6 floats, 2 continuous actions; 0.1 per
  step on the platform, -1 for a fall, 500 steps end an episode as interrupted).
- "reach": walkers on a line, each after a target (observation [position - target, target], one discrete
  branch of 3: left, stay, right by 0.1). -0.01 per step, +1 on reaching the target (within 0.05), which
  ends the episode; 50 steps end it as interrupted. Random play scores about 0.0, walking straight
  to the target about 0.94.

Both behaviours decide every turn; each trains with a policy of its own.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from relayrl.bridge.channel import BridgeError
from relayrl.bridge.examples.ball3d import Platforms
from relayrl.bridge.world import CLOSED, RESET, World

BALL, REACH = "ball", "reach"
STEP, REACH_WITHIN, REACH_STEPS = 0.1, 0.05, 50


class Walkers:
    def __init__(self, n: int, seed: int):
        self.n, self.rng = n, np.random.default_rng(seed + 1)
        self.pos, self.target, self.steps = np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
        self.restart(np.ones(n, bool))

    def restart(self, which: np.ndarray) -> None:
        k = int(which.sum())
        self.pos[which] = self.rng.uniform(-1, 1, k)
        self.target[which] = self.rng.uniform(-1, 1, k)
        self.steps[which] = 0

    def observe(self) -> np.ndarray:
        return np.stack([self.pos - self.target, self.target], axis=1).astype(np.float32)

    def advance(self, moves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self.pos = np.clip(self.pos + STEP * (moves - 1), -1.5, 1.5)
        self.steps += 1
        reached = np.abs(self.pos - self.target) < REACH_WITHIN
        timeout = ~reached & (self.steps >= REACH_STEPS)
        return np.where(reached, 1.0, -0.01).astype(np.float32), reached, timeout


def run(world: World, balls: int, walkers: int, seed: int) -> int:
    kinds = {BALL: Platforms(balls, seed), REACH: Walkers(walkers, seed)}
    ids = {name: np.arange(kind.n, dtype=np.int64) for name, kind in kinds.items()}
    reward = {name: np.zeros(kind.n, np.float32) for name, kind in kinds.items()}
    while True:
        for name, kind in kinds.items():
            world.set_decisions(name, ids[name], [kind.observe()], reward[name])
        status = world.step()
        if status == CLOSED:
            return 0
        if status == RESET:
            for name, kind in kinds.items():
                kind.restart(np.ones(kind.n, bool))
                reward[name][:] = 0
            continue
        for name, kind in kinds.items():
            _, continuous, discrete = world.action_arrays(name)
            action = np.array(continuous, np.float64) if name == BALL else np.array(discrete[:, 0])
            reward[name], ended_badly, timeout = kind.advance(action)
            ended = ended_badly | timeout
            if ended.any():
                world.set_terminations(name, ids[name][ended], [kind.observe()[ended]], reward[name][ended],
                                       timeout[ended])
                kind.restart(ended)
                reward[name] = np.where(ended, 0.0, reward[name]).astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a two-behaviour scene for the relayrl bridge")
    parser.add_argument("--memory-path", required=True)
    parser.add_argument("--balls", type=int, default=8)
    parser.add_argument("--walkers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bridge-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    behaviours = [dict(name=BALL, max_agents=args.balls, observations=[(6,)], continuous=2),
                  dict(name=REACH, max_agents=args.walkers, observations=[(2,)], branches=(3,))]
    try:
        with World(args.memory_path, behaviours=behaviours, timeout_s=args.bridge_timeout) as world:
            return run(world, args.balls, args.walkers, args.seed)
    except BridgeError as exc:
        print(f"two_behaviours: {exc}", file=sys.stderr)
        return exc.exit_code or 4


if __name__ == "__main__":
    sys.exit(main())
