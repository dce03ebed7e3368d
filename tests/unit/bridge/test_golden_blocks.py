"""Golden bytes of a filled decision block, termination block (written by the Python simulator SDK,
``World``) and action block (written by the trainer, ``BridgeEnv``), per docs/bridge-protocol.md §3.3.
The expected bytes are written out by hand, little-endian: if one of these changes, the protocol did.

Behaviour "g": N = 3 agents, observation 0 float32 (2,), observation 1 uint8 (3,), C = 1 continuous
action, discrete branches [2, 3] (M = 5). Its section starts at 72 (S = 64, then the RL region's
count and reserved words); the spec part is 120 bytes, so the blocks start at section offset 120.
"""

from __future__ import annotations

import numpy as np

from inprocess import finish, trainer_and_world  # same folder
from relayrl.bridge import layout as L

SPEC = dict(name="g", max_agents=3, observations=[(2,), ((3,), "uint8")], continuous=1, branches=(2, 3))
BIG_ID = 0x0102030405060708

GOLDEN_DECISIONS = bytes.fromhex(
    "02000000" "00000000"                      # n = 2 deciding agents, reserved
    "0000803f000000c0" "0000003f00004040" "0000000000000000"  # obs 0, N rows: [1, -2], [0.5, 3], unused
    "010203" "fa0007" "000000" "00000000000000"  # obs 1, N rows of 3 bytes: [1 2 3], [250 0 7], unused; pad8
    "0000803e" "0000c0bf" "00000000" "00000000"  # rewards 0.25, -1.5, unused; pad8
    "0700000000000000" "0807060504030201" "0000000000000000"  # agent ids 7, 0x0102030405060708, unused
    "0001000000" "0000010001" "0000000000" "00")  # masks (1 = forbidden), M = 5 per row: branch 0 option 1;
#                                                   branch 1 options 0 and 2; unused; pad8
GOLDEN_TERMINATIONS = bytes.fromhex(
    "01000000" "00000000"                      # m = 1 ended episode, reserved
    "000000bf00000040" + "00" * 16 +           # final obs 0: [-0.5, 2], two unused rows
    "090807" + "00" * 13 +                     # final obs 1: [9 8 7], unused rows, pad8
    "000080bf" + "00" * 12 +                   # last reward -1, unused, pad8
    "01" + "00" * 7 +                          # interrupted: 1 (a step limit), unused, pad8
    "0900000000000000" + "00" * 16)            # agent id 9, unused
GOLDEN_ACTIONS = bytes.fromhex(
    "0000003f" "000080bf" "00000000" "00000000"  # continuous [N, C]: 0.5 (agent 7), -1 (BIG_ID), unused; pad8
    "01000000" "02000000" "00000000" "01000000" "00000000" "00000000")  # discrete [N, B]: [1, 2], [0, 1], unused


def fill_turn(world) -> None:
    """The turn whose blocks the goldens hold (shared with the C twin in test_c_golden.py)."""
    world.request_decision("g", 7).set_observation(0, [1.0, -2.0]).set_observation(1, [1, 2, 3]) \
        .set_reward(0.25).set_action_mask(0, [1])
    world.request_decision("g", BIG_ID).set_observation(0, [0.5, 3.0]).set_observation(1, [250, 0, 7]) \
        .set_reward(-1.5).set_action_mask(1, [0, 2])
    world.end_episode("g", 9, interrupted=True).set_observation(0, [-0.5, 2.0]).set_observation(1, [9, 8, 7]) \
        .set_reward(-1.0)


def blocks(channel) -> tuple[bytes, bytes, bytes]:
    """The decision, termination and action blocks of the channel's only behaviour, as raw bytes."""
    (section,) = L.parse_sections(channel.body, channel.side, channel.rl)
    body = channel.body
    return (bytes(body[section.n_decisions:section.n_terminations]),
            bytes(body[section.n_terminations:section.continuous]),
            bytes(body[section.continuous:section.start + section.size]))


def test_the_hand_written_blocks_are_where_the_layout_puts_them():
    spec = L.BehaviourSpec("g", 3, (L.ObsSpec((2,)), L.ObsSpec((3,), np.dtype("u1"))), 1, (2, 3))
    s = L.layout(spec, 72)
    assert (s.n_decisions - s.start, s.n_terminations - s.n_decisions) == (120, len(GOLDEN_DECISIONS))
    assert s.continuous - s.n_terminations == len(GOLDEN_TERMINATIONS)
    assert s.start + s.size - s.continuous == len(GOLDEN_ACTIONS)


def test_world_writes_the_decision_and_termination_blocks_and_reads_the_trainers_actions(tmp_path):
    seen = {}

    def sim(world):
        world.register(**SPEC)
        fill_turn(world)
        assert world.step() == "ok"
        seen["actions"] = blocks(world.channel)[2]  # as the simulator finds them
        seen["parsed"] = world.actions("g")
        finish(world)

    with trainer_and_world(tmp_path / "bridge", sim) as env:
        assert env.channel.side == 64 and env.channel.rl == 8 + 360
        decisions, terminations, actions = blocks(env.channel)
        assert decisions.hex() == GOLDEN_DECISIONS.hex()
        assert terminations.hex() == GOLDEN_TERMINATIONS.hex()
        assert actions == bytes(len(GOLDEN_ACTIONS))  # nothing written yet
        env.set_actions("g", continuous=[[0.5], [-1.0]], discrete=[[1, 2], [0, 1]])
        env.step()
    assert seen["actions"].hex() == GOLDEN_ACTIONS.hex()
    assert {k: (c.tolist(), d.tolist()) for k, (c, d) in seen["parsed"].items()} == \
        {7: ([0.5], [1, 2]), BIG_ID: ([-1.0], [0, 1])}
