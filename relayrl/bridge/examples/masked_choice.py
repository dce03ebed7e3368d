"""A simulator whose agents have two discrete branches with action masks (a DOTS/ML-Agents behaviour
with ``branches=(3, 4)``), written against the Python SDK::

    relayrl train ppo --env "bridge:python -m relayrl.bridge.examples.masked_choice"

Behaviour "choice": observation [1, t / 10]; every decision each branch allows 2 random options
(the others are forbidden through the bridge's mask block) and pays 0.5 for choosing the lowest
allowed one. The observation says nothing about which options are allowed, so only a policy that
honours the masks scores well; a forbidden option is refused by the trainer before it is sent (masks
are binding, docs/bridge-protocol.md §3.3). Episodes last 10 decisions (interrupted): a perfect one
scores 10.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from relayrl.bridge.channel import BridgeError
from relayrl.bridge.world import CLOSED, RESET, World

NAME, BRANCHES, ALLOWED, LENGTH = "choice", (3, 4), 2, 10


def draw(rng: np.random.Generator, agents: int) -> np.ndarray:
    """[agents, sum(BRANCHES)] bool, True = forbidden (the bridge's convention)."""
    blocks = []
    for size in BRANCHES:
        keys = rng.random((agents, size))
        kth = np.sort(keys, axis=1)[:, ALLOWED - 1:ALLOWED]
        blocks.append(keys > kth)  # the ALLOWED smallest keys of each row stay allowed
    return np.concatenate(blocks, axis=1)


def run(world: World, agents: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    ids = np.arange(agents, dtype=np.int64)
    steps = np.zeros(agents, np.int64)
    reward = np.zeros(agents, np.float32)
    forbidden = draw(rng, agents)
    edges = np.cumsum((0, *BRANCHES))
    while True:
        obs = np.stack([np.ones(agents), steps / LENGTH], axis=1).astype(np.float32)
        world.set_decisions(NAME, ids, [obs], reward, forbidden)
        status = world.step()
        if status == CLOSED:
            return 0
        if status == RESET:
            steps[:], reward[:] = 0, 0.0
            forbidden = draw(rng, agents)
            continue
        _, _, discrete = world.action_arrays(NAME)
        chosen = np.asarray(discrete, np.int64)
        reward = np.zeros(agents, np.float32)
        for b, (a, z) in enumerate(zip(edges[:-1], edges[1:])):
            lowest = np.argmin(forbidden[:, a:z], axis=1)  # the first allowed option
            reward += np.where(chosen[:, b] == lowest, 1.0 / len(BRANCHES), 0.0).astype(np.float32)
        steps += 1
        ended = steps >= LENGTH
        forbidden = draw(rng, agents)
        if ended.any():
            obs = np.stack([np.ones(agents), steps / LENGTH], axis=1).astype(np.float32)
            world.set_terminations(NAME, ids[ended], [obs[ended]], reward[ended], np.ones(int(ended.sum()), bool))
            steps[ended] = 0
            reward[ended] = 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="masked two-branch choice simulator for the relayrl bridge")
    parser.add_argument("--memory-path", required=True)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    spec = dict(name=NAME, max_agents=args.agents, observations=[(2,)], branches=BRANCHES)
    try:
        with World(args.memory_path, behaviours=[spec]) as world:
            return run(world, args.agents, args.seed)
    except BridgeError as exc:
        print(f"masked_choice: {exc}", file=sys.stderr)
        return exc.exit_code or 4


if __name__ == "__main__":
    sys.exit(main())
