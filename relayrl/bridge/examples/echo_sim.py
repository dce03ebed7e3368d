"""The conformance simulator: a scripted world whose every value is a function of the turn, the agent
and the last actions, so a trainer-side test can check each byte it receives. Its C twin is
``relayrl/bridge/c/examples/echo_sim.c``; both must pass ``tests/unit/bridge/conformance.py``.

    python -m relayrl.bridge.examples.echo_sim --memory-path PATH [--bridge-timeout SECONDS]

- behaviour "echo": 8 agents (ids 100..107); obs0 float32 (3,), obs1 uint8 (2, 2); 2 continuous
  actions; discrete branches [3, 2]. At turn t (0 after start or reset) agent i decides when
  (i + t) % 3 != 0: obs0 = [i, t, sum of its last continuous action], obs1 = [[i, t % 256], [its last
  discrete actions]], reward 0.5 i + t, option i % 3 of branch 0 forbidden. When t % 4 == 3, agent
  100 + (t // 4) % 8 ends its episode (final obs by the same formulas, reward -1, interrupted when
  (t // 4) % 2 == 1).
- behaviour "late" (registered at the first t == 5): 4 agents, ids 0..3, obs float32 (2,) = [id, t],
  one continuous action, reward 0, deciding every turn.
- side channel: every record is answered on its channel with its payload reversed.
- stats (since 1.2): every turn sends "echo/turn" = t (most recent) and "echo/deciders" = the number
  of echo agents deciding (sum).
Exit codes: 0 trainer closed normally, 2 version mismatch (found by either side), 3 trainer died or timed out,
4 anything else (a corrupt channel, a trainer that closed with reason 3, 4 or 5).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from relayrl.bridge.channel import BridgeError
from relayrl.bridge.sidechannel import SideChannels, StatsRecorder
from relayrl.bridge.world import CLOSED, RESET, World

ECHO, LATE = "echo", "late"


class Echo(SideChannels):
    """Answers any record with its payload reversed (unknown ids included); sends ``stats``' records too."""

    def __init__(self, stats: StatsRecorder):
        super().__init__()
        self.stats = stats
        self.replies: list[tuple] = []

    def dispatch(self, payload: bytes) -> None:
        from relayrl.bridge import layout as L

        self.replies.extend((cid, msg[::-1]) for cid, msg in L.decode_records(payload))

    def outgoing(self) -> bytes:
        from relayrl.bridge import layout as L

        records = [*self.replies, *((self.stats.channel_id, p) for p in self.stats.outgoing)]
        self.replies, self.stats.outgoing = [], []
        return L.encode_records(records)


def observe(i: int, t: int, cont_sum: float, disc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([i, t, cont_sum], np.float32),
            np.array([[i, t % 256], [disc[0], disc[1]]], np.uint8))


def run(world: World) -> int:
    world.register(ECHO, 8, [((3,), np.float32), ((2, 2), np.uint8)], continuous=2, branches=(3, 2))
    cont = np.zeros(8, np.float64)
    disc = np.zeros((8, 2), np.int64)
    t, late = 0, False
    while True:
        if t == 5 and not late:
            world.register(LATE, 4, [(2,)], continuous=1)
            late = True
        for i in range(8):
            if (i + t) % 3:
                o0, o1 = observe(i, t, cont[i], disc[i])
                world.request_decision(ECHO, 100 + i).set_observation(0, o0).set_observation(1, o1) \
                    .set_reward(0.5 * i + t).set_action_mask(0, [i % 3])
        if t % 4 == 3:
            j = (t // 4) % 8
            o0, o1 = observe(j, t, cont[j], disc[j])
            world.end_episode(ECHO, 100 + j, interrupted=(t // 4) % 2 == 1).set_observation(0, o0) \
                .set_observation(1, o1).set_reward(-1.0)
        if late:
            for a in range(4):
                world.request_decision(LATE, a).set_observation(0, [a, t])
        world.stats.record("echo/turn", t, aggregation="most_recent")
        world.stats.record("echo/deciders", sum(1 for i in range(8) if (i + t) % 3), aggregation="sum")
        status = world.step()
        if status == CLOSED:
            return 0
        if status == RESET:
            t, cont[:], disc[:] = 0, 0.0, 0
            continue
        for agent_id, (c, d) in world.actions(ECHO).items():
            cont[agent_id - 100], disc[agent_id - 100] = float(c.sum()), d
        t += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-path", required=True)
    parser.add_argument("--bridge-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    try:
        world = World(args.memory_path, timeout_s=args.bridge_timeout)
        world.side_channels = Echo(world.stats)
        try:
            return run(world)
        finally:
            world.close()
    except BridgeError as exc:
        print(f"echo_sim: {exc}", file=sys.stderr)
        return exc.exit_code or 4


if __name__ == "__main__":
    sys.exit(main())
