"""A simulator that needs memory, whose agents skip turns (a DOTS/ML-Agents behaviour with ``branches=(3,)``),
written against the Python SDK::

    relayrl train ppo --env "bridge:python -m relayrl.bridge.examples.memory_cue" --set ppo.recurrent=gru

Behaviour "cue": an episode is 4 decisions of one agent. The first decision's observation shows a cue,
one of 3 (one-hot), the later ones show zeros in its place; the observation's last entry is the decision's
index / 4. The action at the 4th decision is judged: 1 when it names the cue, 0 otherwise, and the
episode ends (terminal); the other actions do nothing. Only a policy that remembers the first observation
scores above 1/3 on average (a recurrent one: ``ppo.recurrent``), and it must remember it per agent:
every turn each agent decides with probability 0.6 (``--decide``), else it waits for a later turn, and
an ended agent's id begins its next episode.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from relayrl.bridge.channel import BridgeError
from relayrl.bridge.world import CLOSED, RESET, World

NAME, CUES, LENGTH = "cue", 3, 4


class Episodes:
    def __init__(self, n: int, seed: int, decide: float):
        self.rng, self.decide = np.random.default_rng(seed), decide
        self.cue, self.step = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.restart(np.ones(n, bool))

    def restart(self, which: np.ndarray) -> None:
        self.cue[which] = self.rng.integers(0, CUES, int(which.sum()))
        self.step[which] = 0

    def observe(self) -> np.ndarray:
        shown = np.eye(CUES)[self.cue] * (self.step == 0)[:, None]
        return np.concatenate([shown, (self.step / LENGTH)[:, None]], axis=1).astype(np.float32)

    def deciding(self) -> np.ndarray:
        """Which agents decide this turn (at least one)."""
        mask = self.rng.random(len(self.cue)) < self.decide
        if not mask.any():
            mask[self.rng.integers(len(mask))] = True
        return mask


def run(world: World, agents: int, seed: int, decide: float) -> int:
    episodes = Episodes(agents, seed, decide)
    ids = np.arange(agents, dtype=np.int64)
    while True:
        deciding = episodes.deciding()
        rewards = np.zeros(int(deciding.sum()), np.float32)  # (only the judged decision pays, with its termination)
        world.set_decisions(NAME, ids[deciding], [episodes.observe()[deciding]], rewards)
        status = world.step()
        if status == CLOSED:
            return 0
        if status == RESET:
            episodes.restart(np.ones(agents, bool))
            continue
        acted, _, discrete = world.action_arrays(NAME)
        acted, choice = np.array(acted), np.array(discrete[:, 0], np.int64)
        episodes.step[acted] += 1
        last = episodes.step[acted] >= LENGTH
        if last.any():
            done = acted[last]
            reward = (choice[last] == episodes.cue[done]).astype(np.float32)
            world.set_terminations(NAME, done, [episodes.observe()[done]], reward, np.zeros(len(done), bool))
            ended = np.zeros(agents, bool)
            ended[done] = True
            episodes.restart(ended)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="remember-the-cue simulator for the relayrl bridge")
    parser.add_argument("--memory-path", required=True)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decide", type=float, default=0.6, help="probability that an agent decides in a turn")
    args = parser.parse_args(argv)
    spec = dict(name=NAME, max_agents=args.agents, observations=[(CUES + 1,)], branches=(CUES,))
    try:
        with World(args.memory_path, behaviours=[spec]) as world:
            return run(world, args.agents, args.seed, args.decide)
    except BridgeError as exc:
        print(f"memory_cue: {exc}", file=sys.stderr)
        return exc.exit_code or 4


if __name__ == "__main__":
    sys.exit(main())
