"""A two-team race for self-play: in each match a blue and a red runner start at the same distance on either
side of a coin; the first to reach it wins.

    relayrl train ppo --env "bridge:python -m relayrl.bridge.examples.duel" --set selfplay.enabled=true

Behaviours "blue" and "red" (the same spec, so one policy can play both): one agent per match each, id =
the match; observation [my position - coin, opponent's position - coin] (float32), one branch of 3 (left,
stay, right by 0.1). Reaching the coin (within 0.05) first ends the match: +1 for the winner, -1 for the
other (both terminal); both on the same step: a draw, 0 each; 30 steps: a draw, interrupted. A match that
ends starts the next in the same turn. The distance is uniform in [0.3, 1.0], blue on a random side.

``--opponent scripted`` plays red inside the simulator (red is not registered): a runner that steps towards
the coin half the time and stands still otherwise, which the trained blue policy is measured against.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from relayrl.bridge.channel import BridgeError
from relayrl.bridge.world import CLOSED, RESET, World

BLUE, RED = "blue", "red"
STEP, WITHIN, MAX_STEPS = 0.1, 0.05, 30
SCRIPTED_PACE = 0.5


class Matches:
    def __init__(self, n: int, seed: int):
        self.n, self.rng = n, np.random.default_rng(seed)
        self.pos, self.coin, self.steps = np.zeros((n, 2)), np.zeros(n), np.zeros(n, np.int64)
        self.restart(np.ones(n, bool))

    def restart(self, which: np.ndarray) -> None:
        k = int(which.sum())
        self.coin[which] = self.rng.uniform(-0.5, 0.5, k)
        gap = self.rng.uniform(0.3, 1.0, k) * self.rng.choice([-1.0, 1.0], k)
        self.pos[which] = self.coin[which, None] + np.stack([gap, -gap], axis=1)
        self.steps[which] = 0

    def observe(self, side: int) -> np.ndarray:
        rel = self.pos - self.coin[:, None]
        return np.stack([rel[:, side], rel[:, 1 - side]], axis=1).astype(np.float32)

    def scripted(self) -> np.ndarray:
        """Red's moves: towards the coin half the time."""
        towards = np.where(self.coin > self.pos[:, 1], 2, 0)
        return np.where(self.rng.random(self.n) < SCRIPTED_PACE, towards, 1)

    def advance(self, moves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """moves [n, 2] (0 left, 1 stay, 2 right): (rewards [n, 2], ended [n], interrupted [n])."""
        self.pos = np.clip(self.pos + STEP * (moves - 1), -2.0, 2.0)
        self.steps += 1
        there = np.abs(self.pos - self.coin[:, None]) < WITHIN
        won = there & ~there[:, ::-1]
        reward = won.astype(np.float32) - won[:, ::-1].astype(np.float32)
        interrupted = ~there.any(axis=1) & (self.steps >= MAX_STEPS)
        return reward, there.any(axis=1) | interrupted, interrupted


def run(world: World, matches: Matches, scripted: bool) -> int:
    sides = [BLUE] if scripted else [BLUE, RED]
    ids = np.arange(matches.n, dtype=np.int64)
    reward = np.zeros((matches.n, 2), np.float32)
    while True:
        for k, side in enumerate(sides):
            world.set_decisions(side, ids, [matches.observe(k)], reward[:, k])
        status = world.step()
        if status == CLOSED:
            return 0
        if status == RESET:
            matches.restart(np.ones(matches.n, bool))
            reward[:] = 0
            continue
        moves = np.stack([world.action_arrays(BLUE)[2][:, 0],
                          matches.scripted() if scripted else world.action_arrays(RED)[2][:, 0]], axis=1)
        reward, ended, interrupted = matches.advance(moves)
        if ended.any():
            for k, side in enumerate(sides):
                world.set_terminations(side, ids[ended], [matches.observe(k)[ended]], reward[ended, k],
                                       interrupted[ended])
            matches.restart(ended)
            reward[ended] = 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a two-team race for self-play on the relayrl bridge")
    parser.add_argument("--memory-path", required=True)
    parser.add_argument("--matches", type=int, default=16)
    parser.add_argument("--opponent", choices=["policy", "scripted"], default="policy",
                        help="scripted: red is played by the simulator (only blue is registered)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bridge-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    scripted = args.opponent == "scripted"
    behaviours = [dict(name=side, max_agents=args.matches, observations=[(2,)], branches=(3,))
                  for side in ([BLUE] if scripted else [BLUE, RED])]
    try:
        with World(args.memory_path, behaviours=behaviours, timeout_s=args.bridge_timeout) as world:
            return run(world, Matches(args.matches, args.seed), scripted)
    except BridgeError as exc:
        print(f"duel: {exc}", file=sys.stderr)
        return exc.exit_code or 4


if __name__ == "__main__":
    sys.exit(main())
