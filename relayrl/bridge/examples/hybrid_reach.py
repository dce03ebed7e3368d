"""A simulator whose agents move continuously AND choose a discrete action (a DOTS/ML-Agents behaviour with
``continuous=2`` and ``branches=(4,)``: a hybrid action), written against the Python SDK::

    relayrl train ppo --env "bridge:python -m relayrl.bridge.examples.hybrid_reach"

Behaviour "reach": each agent is a hand on the plane [-1, 1]^2 with an object of one of 3 kinds to pick
up. Observation [x, y, dx, dy, in_reach, kind one-hot x 3] (float32: the hand, the object minus the
hand, 1 when the object is within reach, its kind). Actions: two continuous values in [-1, 1], the
hand's velocity (0.15 per step at full scale), and one branch "grab" of 4 options: 0 wait, k = 1..3
grab with grip k. Grabbing is allowed only within reach (0.25): far from the object the simulator's
mask forbids options 1..3, and a trainer that sent one would be refused (masks are binding,
docs/bridge-protocol.md §3.3). Reward: 2 x the distance gained each step, 0.01 less per step; a grab
ends the episode (terminal) and pays 1 with the object's grip (kind + 1), -1 with another; 30 steps end
it as interrupted. A scripted policy (straight to the object, the right grip when allowed) scores 2.7 on
average; one that moves as well but never grabs, 1.8; one that grabs with a random grip, 1.4; random
moves, about 0.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from relayrl.bridge.channel import BridgeError
from relayrl.bridge.world import CLOSED, RESET, World

NAME, KINDS, CONTINUOUS = "reach", 3, 2
BRANCHES = (1 + KINDS,)
SPEED, REACH, LENGTH, STEP_COST, GRAB_REWARD = 0.15, 0.25, 30, 0.01, 1.0


class Hands:
    def __init__(self, n: int, seed: int):
        self.rng = np.random.default_rng(seed)
        self.hand, self.target = np.zeros((n, 2)), np.zeros((n, 2))
        self.steps, self.kind = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.restart(np.ones(n, bool))

    def restart(self, which: np.ndarray) -> None:
        k = int(which.sum())
        self.hand[which] = self.rng.uniform(-1, 1, (k, 2))
        self.target[which] = self.rng.uniform(-1, 1, (k, 2))
        self.kind[which] = self.rng.integers(0, KINDS, k)
        self.steps[which] = 0

    def distance(self) -> np.ndarray:
        return np.linalg.norm(self.target - self.hand, axis=1)

    def observe(self) -> np.ndarray:
        near = (self.distance() < REACH)[:, None]
        kind = np.eye(KINDS)[self.kind]
        return np.concatenate([self.hand, self.target - self.hand, near, kind], axis=1).astype(np.float32)

    def forbidden(self) -> np.ndarray:
        """[n, 1 + KINDS] bool, True = forbidden (the bridge's convention): grips only within reach."""
        far = self.distance() >= REACH
        return np.concatenate([np.zeros((len(far), 1), bool), np.repeat(far[:, None], KINDS, axis=1)], axis=1)

    def advance(self, velocity: np.ndarray, grab: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One decision step: rewards, which grabbed (terminal), which ran out of steps."""
        grabbed = (grab > 0) & (self.distance() < REACH)  # (the mask already forbade the others)
        right = grab == self.kind + 1
        before = self.distance()
        moving = ~grabbed
        self.hand[moving] = np.clip(self.hand[moving] + SPEED * np.clip(velocity[moving], -1, 1), -1, 1)
        payoff = np.where(grabbed, np.where(right, GRAB_REWARD, -GRAB_REWARD), 0.0)
        reward = 2.0 * (before - self.distance()) - STEP_COST + payoff
        self.steps += 1
        timeout = ~grabbed & (self.steps >= LENGTH)
        return reward.astype(np.float32), grabbed, timeout


def run(world: World, agents: int, seed: int) -> int:
    hands = Hands(agents, seed)
    ids = np.arange(agents, dtype=np.int64)
    reward = np.zeros(agents, np.float32)
    while True:
        world.set_decisions(NAME, ids, [hands.observe()], reward, hands.forbidden())
        status = world.step()
        if status == CLOSED:
            return 0
        if status == RESET:
            hands.restart(np.ones(agents, bool))
            reward[:] = 0
            continue
        _, continuous, discrete = world.action_arrays(NAME)
        reward, grabbed, timeout = hands.advance(np.array(continuous, np.float64), np.array(discrete[:, 0]))
        ended = grabbed | timeout
        if ended.any():
            world.set_terminations(NAME, ids[ended], [hands.observe()[ended]], reward[ended], timeout[ended])
            hands.restart(ended)
            reward = np.where(ended, 0.0, reward).astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="hybrid-action reach-and-grab simulator for the relayrl bridge")
    parser.add_argument("--memory-path", required=True)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    spec = dict(name=NAME, max_agents=args.agents, observations=[(5 + KINDS,)], continuous=CONTINUOUS,
                branches=BRANCHES)
    try:
        with World(args.memory_path, behaviours=[spec]) as world:
            return run(world, args.agents, args.seed)
    except BridgeError as exc:
        print(f"hybrid_reach: {exc}", file=sys.stderr)
        return exc.exit_code or 4


if __name__ == "__main__":
    sys.exit(main())
