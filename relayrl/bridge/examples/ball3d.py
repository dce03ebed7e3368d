"""A 3DBall-like simulator (ML-Agents' first example) written against the Python SDK: many platforms,
each balancing a ball, one agent per platform. Its C twin is ``relayrl/bridge/c/examples/ball3d.c``.

    relayrl train ppo --env "bridge:python -m relayrl.bridge.examples.ball3d" --stop-value 45

Behaviour "ball3d": observation [tilt_x, tilt_z, x, z, vx, vz] (float32), two continuous actions in
[-1, 1] that set the platform's tilt (0.25 rad at full scale) about each axis. Every decision the
ball moves by dt = 0.05 s: v += g sin(tilt) dt, p += v dt, plus a random push of up to 0.05 m/s per
axis. Reward 0.1 per step on the platform; leaving it (|x| or |z| > 1) ends the episode with -1;
500 steps end it as interrupted. An episode starts untilted with the ball at a random spot within
0.5 of the centre, rolling at up to 0.3 m/s. All agents decide every turn; a platform whose episode
ended starts the next one in the same turn. A perfect episode scores 50. Every turn it sends the
balls that fell as the stat "balls_dropped" (summed: ``sim/balls_dropped`` in the run's metrics).

Options for tests and benchmarks: ``--step-ms MS`` makes every step cost MS milliseconds of CPU (a
busy wait, like a heavier physics step; benchmarks/bridge_instances.py), ``--close-after TURNS``
closes the channel normally after that many turns and exits 0, as an editor leaving play mode does.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from relayrl.bridge.channel import BridgeError
from relayrl.bridge.world import CLOSED, RESET, World

NAME = "ball3d"
DT, G, MAX_TILT, PUSH, EDGE, MAX_STEPS = 0.05, 9.81, 0.25, 0.05, 1.0, 500


class Platforms:
    def __init__(self, n: int, seed: int):
        self.n, self.rng = n, np.random.default_rng(seed)
        self.tilt, self.pos, self.vel = np.zeros((n, 2)), np.zeros((n, 2)), np.zeros((n, 2))
        self.steps = np.zeros(n, np.int64)
        self.restart(np.ones(n, bool))

    def restart(self, which: np.ndarray) -> None:
        k = int(which.sum())
        self.tilt[which] = 0.0
        self.pos[which] = self.rng.uniform(-0.5, 0.5, (k, 2))
        self.vel[which] = self.rng.uniform(-0.3, 0.3, (k, 2))
        self.steps[which] = 0

    def observe(self) -> np.ndarray:
        return np.concatenate([self.tilt, self.pos, self.vel], axis=1).astype(np.float32)

    def advance(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One decision step: rewards, which fell off, which ran out of steps."""
        self.tilt = MAX_TILT * np.clip(actions, -1.0, 1.0)
        self.vel += G * np.sin(self.tilt) * DT + PUSH * self.rng.uniform(-1, 1, (self.n, 2))
        self.pos += self.vel * DT
        self.steps += 1
        fell = (np.abs(self.pos) > EDGE).any(axis=1)
        timeout = ~fell & (self.steps >= MAX_STEPS)
        return np.where(fell, -1.0, 0.1).astype(np.float32), fell, timeout


def behaviour(agents: int) -> dict:
    return dict(name=NAME, max_agents=agents, observations=[(6,)], continuous=2)


def run(world: World, agents: int, seed: int, step_ms: float = 0.0, close_after: int = 0) -> int:
    platforms = Platforms(agents, seed)
    ids = np.arange(agents, dtype=np.int64)
    reward = np.zeros(agents, np.float32)
    turns = 0
    while True:
        world.set_decisions(NAME, ids, [platforms.observe()], reward)
        if close_after and turns >= close_after:
            world.close()  # the editor left play mode
            return 0
        status = world.step()
        turns += 1
        if status == CLOSED:
            return 0
        if step_ms > 0:
            busy_wait(step_ms / 1000)
        if status == RESET:
            platforms.restart(np.ones(agents, bool))
            reward[:] = 0
            continue
        _, continuous, _ = world.action_arrays(NAME)
        reward, fell, timeout = platforms.advance(np.array(continuous, np.float64))
        world.stats.record("balls_dropped", int(fell.sum()), aggregation="sum")
        ended = fell | timeout
        if ended.any():
            world.set_terminations(NAME, ids[ended], [platforms.observe()[ended]], reward[ended], timeout[ended])
            platforms.restart(ended)
            reward = np.where(ended, 0.0, reward).astype(np.float32)


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="3DBall-like balancing simulator for the relayrl bridge")
    parser.add_argument("--memory-path", required=True)
    parser.add_argument("--agents", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bridge-timeout", type=float, default=60.0)
    parser.add_argument("--step-ms", type=float, default=0.0, help="CPU time each step costs (a busy wait)")
    parser.add_argument("--close-after", type=int, default=0, metavar="TURNS",
                        help="close the channel normally after TURNS turns (an editor leaving play mode)")
    args = parser.parse_args(argv)
    try:
        with World(args.memory_path, behaviours=[behaviour(args.agents)], timeout_s=args.bridge_timeout) as world:
            return run(world, args.agents, args.seed, args.step_ms, args.close_after)
    except BridgeError as exc:
        print(f"ball3d: {exc}", file=sys.stderr)
        return exc.exit_code or 4


if __name__ == "__main__":
    sys.exit(main())
