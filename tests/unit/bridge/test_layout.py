"""Golden bytes for the bridge layout (docs/bridge-protocol.md §2, §3): if one of these changes, the
protocol changed, and the version must too."""

from __future__ import annotations

import struct
import uuid

import numpy as np
import pytest

from relayrl.bridge import layout as L

GOLDEN_HEADER = bytes.fromhex(
    "524c524c42524447"                  # magic
    "01000200" "00000000"               # trainer protocol 1.2, simulator 0.0 (not attached)
    "0000000000000000"                  # turn 0
    "00000000" "01000000"               # reset, query, trainer_closed, simulator_closed; generation 1
    "40000000" "08000000"               # S = 64, R = 8
    "04030201" "00000000"               # trainer pid 0x01020304, simulator pid
    "60ea0000" "00000000"               # trainer timeout 60000 ms (1.1), simulator timeout (written at attach)
    "00000000" "00000000")              # keep-alive counters, trainer and simulator (1.1)

SPEC = L.BehaviourSpec("ab", 2, (L.ObsSpec((3,)), L.ObsSpec((2, 2), np.dtype("u1"))), continuous=1, branches=(2,))
GOLDEN_SPEC = bytes.fromhex(
    "1801000002000000" "0200010001000000" "6162" + "00" * 62 +
    "0101000003000000" "0000000000000000" "0202000002000000" "0200000000000000" "0200000000000000")


def test_header_at_creation():
    assert L.new_header(0x01020304, 60.0) == GOLDEN_HEADER
    assert len(GOLDEN_HEADER) == L.HEADER_SIZE
    assert (L.OFF_TRAINER_TIMEOUT, L.OFF_SIM_TIMEOUT, L.OFF_TRAINER_ALIVE, L.OFF_SIM_ALIVE) == (48, 52, 56, 60)


@pytest.mark.parametrize("seconds, ms", [(60.0, 60000), (1.5, 1500), (0.0001, 1), (1e-3 + 1e-9, 2), (0, 0), (-1, 0),
                                         (None, 0), (float("inf"), 0), (1e10, 0xFFFFFFFF)])
def test_a_timeout_is_published_in_whole_milliseconds_rounded_up_and_0_means_none(seconds, ms):
    assert L.timeout_ms(seconds) == ms


def test_behaviour_spec_bytes():
    section = L.layout(SPEC, 72)
    assert section.size == 280
    assert L.encode_spec(SPEC, section.size) == GOLDEN_SPEC


def test_every_block_offset_of_a_section():
    """N=2 agents, obs (3,) float32 and (2, 2) uint8, C=1, branches [2], section at offset 72."""
    s = L.layout(SPEC, 72)
    assert (s.n_decisions, s.decision_obs, s.decision_reward, s.decision_ids, s.decision_mask) == \
        (192, [200, 224], 232, 240, 256)
    assert (s.n_terminations, s.final_obs, s.final_reward, s.interrupted, s.final_ids) == \
        (264, [272, 296], 304, 312, 320)
    assert (s.continuous, s.discrete, s.start + s.size) == (336, 344, 352)


def _body(specs: list[L.BehaviourSpec], side: int = 64) -> bytearray:
    rl = L.rl_size(specs)
    body = bytearray(side + rl)
    struct.pack_into("<II", body, side, len(specs), 0)
    at = side + 8
    for spec in specs:
        section = L.layout(spec, at)
        head = L.encode_spec(spec, section.size)
        body[at:at + len(head)] = head
        at += section.size
    return body


def test_sections_parse_back_to_their_specs():
    other = L.BehaviourSpec("walker-é", 1000, (L.ObsSpec((84, 84, 3), np.dtype("u1")),), continuous=0,
                            branches=(3, 5, 2))
    body = _body([SPEC, other])
    sections = L.parse_sections(body, 64, len(body) - 64)
    assert [s.spec for s in sections] == [SPEC, other]
    assert sections[1].start == sections[0].start + sections[0].size


def test_a_section_whose_size_disagrees_with_its_spec_is_refused():
    body = _body([SPEC])
    struct.pack_into("<I", body, 72, 288)  # section size field
    with pytest.raises(L.LayoutError, match="declares 288 bytes, its spec needs 280"):
        L.parse_sections(body, 64, len(body) - 64)
    body = _body([SPEC])
    struct.pack_into("<I", body, 64, 3)  # three behaviours claimed, one present
    with pytest.raises(L.LayoutError, match="past the RL region"):
        L.parse_sections(body, 64, len(body) - 64)


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="x" * 65), "1 to 64 bytes"),
    (dict(max_agents=0), "max agents"),
    (dict(observations=()), "1 to 16 observations"),
    (dict(observations=(L.ObsSpec((2, 0)),)), "shape"),
    (dict(observations=(L.ObsSpec((2,), np.dtype("f8")),)), "float32 or uint8"),
    (dict(continuous=0, branches=()), "no actions"),
    (dict(branches=(0,)), "branch sizes"),
])
def test_invalid_specs_say_what_is_wrong(kwargs, message):
    args = dict(name="b", max_agents=4, observations=(L.ObsSpec((3,)),), continuous=2, branches=())
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        L.BehaviourSpec(**args)


def test_side_channel_records():
    channel = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
    raw = L.encode_records([(channel, b"\x02\x00\x00\x00\x00\x00\x80\x3f"), (channel, b"")])
    assert raw[:16] == bytes.fromhex("2c3451e97e4fea11b238784f4387d1f7")  # .NET Guid byte order
    assert raw[16:20] == b"\x08\x00\x00\x00" and len(raw) == 2 * 20 + 8
    assert L.decode_records(raw) == [(channel, b"\x02\x00\x00\x00\x00\x00\x80\x3f"), (channel, b"")]
    with pytest.raises(L.LayoutError, match="claims 8 bytes"):
        L.decode_records(raw[:25])
    with pytest.raises(L.LayoutError, match="cut short"):
        L.decode_records(raw[:10])


def test_side_channel_growth_keeps_the_body_aligned():
    for length in (0, 1, 60, 61, 1 << 20):
        side = L.grown_side(length)
        assert side % 8 == 0 and side >= length + 4


GOLDEN_RECORDS = bytes.fromhex("".join([
    "2c3451e97e4fea11b238784f4387d1f7", "0c000000",  # engine configuration, 12 bytes:
    "00000000", "00050000", "d0020000",               #   type 0, screen resolution 1280 x 720
    "2c3451e97e4fea11b238784f4387d1f7", "08000000",  # engine configuration, 8 bytes (a record per setting):
    "02000000", "0000a041",                           #   type 2, time scale 20.0
    "1e894c530f81ea11a9d0822485860400", "0d000000",  # environment parameters, 13 bytes:
    "01000000", "67", "00000000", "000040c0",         #   key length 1, "g", value type 0 (float), -3.0
]))


def test_side_channel_settings_are_one_record_each_back_to_back():
    """§3.1: one engine setting or one parameter per record, records without padding."""
    from relayrl.bridge.sidechannel import EngineConfigurationChannel, EnvironmentParametersChannel, SideChannels

    engine, params = EngineConfigurationChannel(), EnvironmentParametersChannel()
    engine.set_configuration(width=1280, height=720, time_scale=20.0)
    params.set_float_parameter("g", -3.0)
    raw = SideChannels([engine, params]).outgoing()
    assert raw.hex() == GOLDEN_RECORDS.hex()
    records = L.decode_records(raw)
    assert [EngineConfigurationChannel.decode(p) for _, p in records[:2]] == \
        [("screen_resolution", (1280, 720)), ("time_scale", (20.0,))]
    assert EnvironmentParametersChannel.decode(records[2][1]) == ("g", -3.0)
