"""Golden bytes of a filled decision block, termination block (written by the Python simulator SDK,
``World``) and action block (written by the trainer, ``BridgeEnv``), per docs/bridge-protocol.md §3.3.
The expected bytes are written out by hand, little-endian: if one of these changes, the protocol did.

Behaviour "g": N = 3 agents, observation 0 float32 (2,), observation 1 uint8 (3,), C = 1 continuous
action, discrete branches [2, 3] (M = 5). Its section starts at 72 (S = 64, then the RL region's
count and reserved words); the spec part is 120 bytes, so the blocks start at section offset 120.
"""

from __future__ import annotations

import numpy as np
import pytest

from inprocess import finish, trainer_and_world  # same folder
from relayrl.bridge import BridgeError
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
    "00000000" "02000000" "00000000" "01000000" "00000000" "00000000")  # discrete [N, B]: [0, 2], [0, 1], unused


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
        env.set_actions("g", continuous=[[0.5], [-1.0]], discrete=[[0, 2], [0, 1]])  # options the masks allow
        env.step()
    assert seen["actions"].hex() == GOLDEN_ACTIONS.hex()
    assert {k: (c.tolist(), d.tolist()) for k, (c, d) in seen["parsed"].items()} == \
        {7: ([0.5], [0, 2]), BIG_ID: ([-1.0], [0, 1])}


# ---- a whole section, spec part included (§3.3): section size, pad8 after each observation block, M_b,
# row-major [N, C] and [N, B] actions

ODD = dict(name="p", max_agents=3, observations=[((3,), "uint8"), ((5,), "uint8")], continuous=3, branches=(2, 1, 3))
Z = "00"  # one zero byte, for the padding below
GOLDEN_SECTION = bytes.fromhex("".join([
    # spec part: 80 + 16 K + 4 B = 124 bytes, pad8 -> 128
    "90010000",                                # section size 400: the whole section, spec part and every block
    "03000000", "0200", "0300", "03000000",    # N = 3, K = 2, B = 3, C = 3
    "70", Z * 63,                              # name "p"
    "0201000003000000", "0000000000000000",    # obs 0: uint8, rank 1, dims [3]
    "0201000005000000", "0000000000000000",    # obs 1: uint8, rank 1, dims [5]
    "02000000", "01000000", "03000000",        # branch sizes 2, 1, 3 (M = 6)
    Z * 4,                                     # pad8
    # decision block, at 128
    "02000000", "00000000",                    # n = 2, reserved
    "010203", "040506", "000000", Z * 7,       # obs 0, N rows of 3 bytes, then its own pad8 (9 -> 16)
    "0a0b0c0d0e", "1415161718", Z * 5, Z,      # obs 1, N rows of 5 bytes, then its own pad8 (15 -> 16)
    "0000803f", "00000040", "00000000", Z * 4,  # rewards 1, 2, unused; pad8
    "0500000000000000", "0600000000000000", Z * 8,  # agent ids 5, 6, unused
    "0100", "00", "000100",                    # mask row 0: branch 0 [1 0] at M_0 = 0, branch 1 [0] at M_1 = 2,
    "0000", "00", "010001",                    #   branch 2 [0 1 0] at M_2 = 3; row 1: branch 2 [1 0 1]
    Z * 6, Z * 6,                              # row 2 unused; pad8 (18 -> 24)
    # termination block, at 232
    "01000000", "00000000",                    # m = 1, reserved
    "070809", Z * 13,                          # final obs 0 (9 -> 16)
    "1e1f202122", Z * 11,                      # final obs 1 (15 -> 16)
    "000080bf", Z * 12,                        # last reward -1; pad8
    Z * 8,                                     # interrupted: 0 (terminal); pad8
    "0900000000000000", Z * 16,                # agent id 9
    # action block, at 320, written by the trainer
    "0000003f", "000080be", "0000803f",        # continuous [N, C] row-major: row 0 = [0.5, -0.25, 1]
    "0000003e", "0000403f", "000080bf",        #   row 1 = [0.125, 0.75, -1]
    Z * 12, Z * 4,                             # row 2 unused; pad8 (36 -> 40)
    "01000000", "00000000", "02000000",        # discrete [N, B] row-major: row 0 = [1, 0, 2]
    "00000000", "00000000", "01000000",        #   row 1 = [0, 0, 1]
    Z * 12, Z * 4,                             # row 2 unused; pad8
]))
ACTION_AT = 320
CONTINUOUS = [[0.5, -0.25, 1.0], [0.125, 0.75, -1.0]]
DISCRETE = [[1, 0, 2], [0, 0, 1]]  # options the masks allow


def fill_odd_turn(world) -> None:
    """The turn GOLDEN_SECTION holds (shared with the C twin in test_c_golden.py)."""
    world.request_decision("p", 5).set_observation(0, [1, 2, 3]).set_observation(1, [10, 11, 12, 13, 14]) \
        .set_reward(1.0).set_action_mask(0, [0]).set_action_mask(2, [1])
    world.request_decision("p", 6).set_observation(0, [4, 5, 6]).set_observation(1, [20, 21, 22, 23, 24]) \
        .set_reward(2.0).set_action_mask(2, [0, 2])
    world.end_episode("p", 9).set_observation(0, [7, 8, 9]).set_observation(1, [30, 31, 32, 33, 34]).set_reward(-1.0)


def section_bytes(channel) -> bytes:
    (section,) = L.parse_sections(channel.body, channel.side, channel.rl)
    return bytes(channel.body[section.start:section.start + section.size])


def test_the_odd_section_is_where_the_layout_puts_it():
    spec = L.BehaviourSpec("p", 3, (L.ObsSpec((3,), np.dtype("u1")), L.ObsSpec((5,), np.dtype("u1"))), 3, (2, 1, 3))
    s = L.layout(spec, 72)
    assert s.size == len(GOLDEN_SECTION) == 400
    assert [a - s.start for a in (s.n_decisions, *s.decision_obs, s.decision_reward, s.decision_ids,
                                  s.decision_mask, s.n_terminations, s.continuous, s.discrete)] == \
        [128, 136, 152, 168, 184, 208, 232, 320, 360]


def test_a_whole_section_pins_section_size_pad8_masks_and_row_major_actions(tmp_path):
    seen = {}

    def sim(world):
        world.register(**ODD)
        fill_odd_turn(world)
        assert world.step() == "ok"
        seen["section"] = section_bytes(world.channel)  # with the trainer's actions
        seen["actions"] = world.action_arrays("p")[1].tolist(), world.action_arrays("p")[2].tolist()
        fill_odd_turn(world)
        assert world.step() == "ok"  # the trainer gives "p" no actions this time
        seen["default"] = world.action_arrays("p")[1].tolist(), world.action_arrays("p")[2].tolist()
        finish(world)

    with trainer_and_world(tmp_path / "bridge", sim) as env:
        assert section_bytes(env.channel).hex() == (GOLDEN_SECTION[:ACTION_AT] + bytes(80)).hex()
        decisions, _ = env.get_steps("p")
        assert [m.tolist() for m in decisions.action_mask] == [[[True, False], [False, False]], [[False], [False]],
                                                               [[False, True, False], [True, False, True]]]
        env.set_actions("p", continuous=CONTINUOUS, discrete=DISCRETE)
        env.step()
        env.step()
    assert seen["section"].hex() == GOLDEN_SECTION.hex()
    assert seen["actions"] == (CONTINUOUS, DISCRETE)
    # no actions given: 0.0 continuous, and in each branch the lowest option the row's mask allows
    assert seen["default"] == ([[0.0] * 3] * 2, [[1, 0, 0], [0, 0, 1]])


def test_masks_are_binding_and_continuous_actions_finite(tmp_path):
    def sim(world):
        world.register(**ODD)
        fill_odd_turn(world)
        world.step()
        world.request_decision("p", 5).set_observation(0, [0] * 3).set_observation(1, [0] * 5) \
            .set_action_mask(0, [0, 1])  # every option of branch 0 forbidden: the simulator's mistake
        finish(world)

    with trainer_and_world(tmp_path / "bridge", sim) as env:
        with pytest.raises(BridgeError, match=r"discrete action 0 of branch 0 for agent 5 of 'p' is forbidden by its "
                                              r"action mask: choose among the options its mask allows"):
            env.set_actions("p", discrete=[[0, 0, 0], [0, 0, 1]])
        with pytest.raises(BridgeError, match=r"action 1 of branch 2 for agent 5 .* forbidden"):
            env.set_actions("p", discrete=[[1, 0, 1], [0, 0, 1]])
        with pytest.raises(BridgeError, match=r"hold NaN or infinity \(agent 6\)"):
            env.set_actions("p", continuous=[[0.0, 0.0, 0.0], [0.0, np.inf, 0.0]])
        env.set_actions("p", continuous=[[5.0, -7.0, 0.0], [0.0, 0.0, 0.0]], discrete=DISCRETE)  # no clipping
        env.step()
        with pytest.raises(BridgeError, match=r"forbids every option of branch 0: .* the simulator must leave at "
                                              r"least one option of each branch allowed"):
            env.set_actions("p", discrete=[[1, 0, 0]])
