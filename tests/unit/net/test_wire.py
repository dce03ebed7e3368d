import json
import os
import pickle

import msgpack
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relayrl.net import wire
from relayrl.net.wire import Message, WireError, decode, encode, weights_from_bytes, weights_to_bytes


def _header(**fields) -> bytes:
    """A valid SAMPLES header with ``fields`` replaced (a value of ... removes the field)."""
    header = {"proto": wire.PROTOCOL, "type": wire.SAMPLES, "sender": "w", "incarnation": 0, "seq": 0, "version": 0,
              "arrays": [], "blob": False, "meta": {}}
    header.update(fields)
    return msgpack.packb({k: v for k, v in header.items() if v is not ...}, use_bin_type=True)


def _bytes(frames) -> list[bytes]:
    return [bytes(f) for f in frames]


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("dtype", sorted(wire.DTYPES))
def test_every_allowed_dtype_round_trips_in_every_shape(dtype):
    rng = np.random.default_rng(0)
    dt = np.dtype(dtype)
    arrays = {
        "scalar": (rng.random(()) * 100).astype(dt),
        "empty": np.zeros((0, 3), dt),
        "vector": (rng.random(7) * 100).astype(dt),
        "cube": (rng.random((2, 3, 4)) * 100).astype(dt),
        "eight_dims": np.ones((1, 2, 1, 2, 1, 2, 1, 2), dt),
    }
    frames = encode(wire.SAMPLES, sender="w-1", incarnation=2**63 - 1, seq=7, version=3, arrays=arrays,
                    meta={"env_steps": 64})
    msg = decode(_bytes(frames))
    assert (msg.type, msg.sender, msg.incarnation, msg.seq, msg.version, msg.blob) == \
        (wire.SAMPLES, "w-1", 2**63 - 1, 7, 3, None)
    assert msg.meta == {"env_steps": 64}
    assert list(msg.arrays) == list(arrays)
    for name, original in arrays.items():
        got = msg.arrays[name]
        assert got.dtype == dt and got.shape == original.shape
        np.testing.assert_array_equal(got, original)


def test_big_endian_and_non_contiguous_arrays_arrive_as_their_values():
    big = np.arange(6, dtype=">f4").reshape(2, 3)
    strided = np.arange(20, dtype=np.int64)[::3]
    fortran = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    msg = decode(_bytes(encode(wire.SAMPLES, arrays={"big": big, "strided": strided, "fortran": fortran})))
    assert msg.arrays["big"].dtype == np.dtype("<f4")
    np.testing.assert_array_equal(msg.arrays["big"], big)
    np.testing.assert_array_equal(msg.arrays["strided"], strided)
    np.testing.assert_array_equal(msg.arrays["fortran"], fortran)


def test_meta_and_blob_round_trip():
    meta = {"env_steps": 64, "returns": [1.5, -2.0], "nested": {"a": [1, "x", None, True]}, "crc": {"obs": 123}}
    blob = os.urandom(1000) + b"\x00"
    msg = decode(_bytes(encode(wire.WEIGHTS, sender="t", version=9, meta=meta, blob=blob,
                               arrays={"x": np.arange(3, dtype=np.uint8)})))
    assert msg.type == wire.WEIGHTS and msg.version == 9 and msg.meta == meta and msg.blob == blob
    np.testing.assert_array_equal(msg.arrays["x"], [0, 1, 2])
    empty_blob = decode(_bytes(encode(wire.WEIGHTS, blob=b"")))
    assert empty_blob.blob == b""
    no_blob = decode(_bytes(encode(wire.PING)))
    assert no_blob == Message(wire.PING)


def test_decoded_arrays_are_read_only_even_from_writable_buffers():
    frames = encode(wire.SAMPLES, arrays={"x": np.arange(4, dtype=np.float32)})
    for as_frame in (bytes, bytearray):  # bytearray: a writable buffer, like a zmq Frame's
        arr = decode([as_frame(f) for f in frames]).arrays["x"]
        assert not arr.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1.0


def test_encode_refuses_what_the_protocol_does_not_carry():
    with pytest.raises(ValueError, match="unknown message type"):
        encode("nonsense")
    for bad in (np.array(["a", "b"]), np.array([object()]), np.zeros(2, np.complex64)):
        with pytest.raises(ValueError, match="does not carry"):
            encode(wire.SAMPLES, arrays={"x": bad})
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match="incarnation"):
            encode(wire.SAMPLES, incarnation=bad)


def test_weights_round_trip_keeps_nested_structure_kinds_and_values():
    weights = {"model": {"fc.weight": torch.randn(3, 2), "fc.bias": torch.zeros(3, dtype=torch.float64)},
               "obs_rms": {"mean": np.arange(4, dtype=np.float32), "var": np.ones((2, 2)), "count": 5.5, "steps": 7},
               "log_alpha": torch.tensor(-0.5), "zero_d": np.array(2.0, np.float32),  # 0-d stays 0-d
               "top": 3, "scale": 0.25}
    back = weights_from_bytes(weights_to_bytes(weights))
    assert set(back) == set(weights) and set(back["model"]) == {"fc.weight", "fc.bias"}
    for key in ("fc.weight", "fc.bias"):
        assert isinstance(back["model"][key], torch.Tensor)
        assert back["model"][key].dtype == weights["model"][key].dtype
        assert torch.equal(back["model"][key], weights["model"][key])
    for key in ("mean", "var"):
        assert isinstance(back["obs_rms"][key], np.ndarray)
        np.testing.assert_array_equal(back["obs_rms"][key], weights["obs_rms"][key])
        assert back["obs_rms"][key].dtype == weights["obs_rms"][key].dtype
    assert type(back["obs_rms"]["count"]) is float and back["obs_rms"]["count"] == 5.5
    assert type(back["obs_rms"]["steps"]) is int and back["obs_rms"]["steps"] == 7
    assert back["log_alpha"].shape == () and back["log_alpha"].item() == -0.5
    assert back["zero_d"].shape == () and back["zero_d"].dtype == np.float32 and back["zero_d"] == 2.0
    assert type(back["top"]) is int and back["top"] == 3
    assert type(back["scale"]) is float and back["scale"] == 0.25


# ---------------------------------------------------------------- malformed input: WireError and nothing else

ARRAY = np.arange(6, dtype=np.float32).reshape(2, 3).tobytes()


@pytest.mark.parametrize("frames, match", [
    ([], "empty message"),
    ([b"\xc1\xc1garbage\xff"], "not msgpack"),
    ([b""], "not msgpack"),
    ([msgpack.packb([1, "samples"])], "not a map"),
    ([msgpack.packb(42)], "not a map"),
    ([msgpack.packb({1: 2})], "not msgpack"),  # non-string map keys
    ([_header(proto=...)], "protocol version"),
    ([_header(type="launch_missiles")], "unknown message type"),
    ([_header(type=["samples"])], "unknown message type"),  # unhashable: must not be a TypeError
    ([_header(type={"a": 1})], "unknown message type"),
    ([_header(type=None)], "unknown message type"),
    ([_header(sender=5)], "sender"),
    ([_header(sender="x" * 300)], "sender"),
    ([_header(meta=[1])], "meta must be a map"),
    ([_header(arrays={"x": 1})], "arrays must be a list"),
    ([_header(arrays=[["x", "<f4", [1]]] * 65)] + [b"\0" * 4] * 65, "arrays must be a list"),
    ([_header(seq="7")], "'seq' must be an integer"),
    ([_header(seq=True)], "'seq' must be an integer"),
    ([_header(version=1.5)], "'version' must be an integer"),
    ([_header(incarnation=...)], "header lacks incarnation"),  # a version-1 header
    ([_header(incarnation="1")], "'incarnation' must be an integer"),
    ([_header(incarnation=-1)], "incarnation -1 is outside"),
    ([_header(incarnation=2**63)], "is outside"),
    # protocol 2.1: what 2.0 already ruled out, no longer taken
    ([_header(seq=2**63)], r"seq 9223372036854775808 is outside \[0, 2\*\*63\)"),
    ([_header(seq=2**64 - 1)], "seq 18446744073709551615 is outside"),  # msgpack's largest integer
    ([_header(seq=-1)], "seq -1 is outside"),
    ([_header(version=-2)], r"version -2 is outside \[-1, 2\*\*63\)"),
    ([_header(version=2**63)], "version 9223372036854775808 is outside"),
    ([_header(blob=1)], "blob must be true or false"),
    ([_header(type=wire.PING, sender=...)], "header lacks sender"),
    ([_header(type=wire.PING, meta=..., arrays=..., blob=...)], "header lacks arrays, blob, meta"),
    ([_header(type=wire.PING, seq=..., version=...)], "header lacks seq, version"),
    ([_header(arrays=[["x", "<f4", [2, 3]]])], "frames, the header announces 2"),
    ([_header(), b"extra"], "frames, the header announces 1"),
    ([_header(blob=True)], "frames, the header announces 2"),
    ([_header(arrays=[["x", "<f4", [2, 3]]]), ARRAY[:-1]], "frame has 23 bytes"),
    ([_header(arrays=[["x", "<f4", [2, 3]]]), ARRAY + b"\0"], "frame has 25 bytes"),
    ([_header(arrays=[["x", "<f8", [2, 3]]]), ARRAY], "need 48"),
    ([_header(arrays=[["x", "|O", [1]]]), b"\0" * 8], "dtype '|O'"),
    ([_header(arrays=[["x", "<U4", [1]]]), b"\0" * 16], "dtype '<U4'"),
    ([_header(arrays=[["x", ">f4", [1]]]), b"\0" * 4], "dtype '>f4'"),
    ([_header(arrays=[["x", "<c8", [1]]]), b"\0" * 8], "dtype '<c8'"),
    ([_header(arrays=[["x", "V8", [1]]]), b"\0" * 8], "dtype 'V8'"),
    ([_header(arrays=[["x", 5, [1]]]), b"\0" * 8], "dtype 5"),
    ([_header(arrays=[["x", "<f4", [-1]]]), b""], "non-negative integers"),
    ([_header(arrays=[["x", "<f4", [1.0]]]), b"\0" * 4], "non-negative integers"),
    ([_header(arrays=[["x", "<f4", ["1"]]]), b"\0" * 4], "non-negative integers"),
    ([_header(arrays=[["x", "<f4", [True]]]), b"\0" * 4], "non-negative integers"),
    ([_header(arrays=[["x", "<f4", 4]]), b"\0" * 16], "non-negative integers"),
    ([_header(arrays=[["x", "|u1", [1] * 9]]), b"\0"], "at most 8"),
    ([_header(arrays=[["x", "|u1", [2**40]]]), b""], "non-negative integers"),
    # the product wraps to 0 in int64 arithmetic: must not pass the size check and fail in reshape
    ([_header(arrays=[["x", "|u1", [2**32, 2**32]]]), b""], "need 18446744073709551616"),
    ([_header(arrays=[["x", "<f4"]]), b""], "descriptor must be"),
    ([_header(arrays=["x"]), b""], "descriptor must be"),
    ([_header(arrays=[["", "<f4", [1]]]), b"\0" * 4], "non-empty string"),
    ([_header(arrays=[[7, "<f4", [1]]]), b"\0" * 4], "non-empty string"),
])
def test_malformed_messages_raise_wire_error(frames, match):
    with pytest.raises(WireError, match=match):
        decode(frames)


def test_wrong_protocol_version_names_both_versions_and_the_fix():
    for other in (0, 1, 2, 4, "3", None, 3.0, True):  # 3.0 == 3 in Python, and msgpack keeps it a float
        with pytest.raises(WireError) as info:
            decode([_header(proto=other)])
        text = str(info.value)
        assert repr(other) in text and str(wire.PROTOCOL) in text and "same relayrl release" in text


def test_size_limits():
    frames = encode(wire.SAMPLES, arrays={"x": np.zeros(1000, np.uint8)})
    decode(frames, max_bytes=2000)
    with pytest.raises(WireError, match="exceeds the limit of 1000"):
        decode(frames, max_bytes=1000)
    with pytest.raises(WireError, match="header of .* bytes exceeds"):
        decode([_header(meta={"pad": "x" * (wire.MAX_HEADER_BYTES + 1)})])


def test_a_pickle_used_as_a_header_is_rejected():
    for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
        payload = pickle.dumps({"proto": 1, "type": "samples"}, protocol=protocol)
        with pytest.raises(WireError):
            decode([payload])


class _CreatesFile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_decoding_a_malicious_pickle_never_runs_it(tmp_path):
    target = tmp_path / "pwned"
    payload = pickle.dumps(_CreatesFile(str(target)))
    pickle.loads(payload).close()  # the payload really does create the file when unpickled
    assert target.exists()
    target.unlink()
    frames_tried = [[payload], [_header(blob=True), payload], [payload, payload],
                    [_header(arrays=[["x", "|u1", [len(payload)]]]), payload]]
    for frames in frames_tried:
        try:
            decode(frames)
        except WireError:
            pass
    with pytest.raises(WireError):
        weights_from_bytes(payload)
    blob = decode([_header(type=wire.WEIGHTS, blob=True), payload]).blob
    with pytest.raises(WireError):
        weights_from_bytes(blob)
    assert not target.exists()


def test_a_pickle_as_the_weights_blob_is_rejected():
    with pytest.raises(WireError):
        weights_from_bytes(pickle.dumps({"model": {"w": np.ones(3)}}))


def test_weights_blob_must_be_a_relayrl_safetensors_file():
    from safetensors.numpy import save

    arrays = {"w": np.ones(3, np.float32)}
    with pytest.raises(WireError, match="no relayrl.kinds"):
        weights_from_bytes(save(arrays))
    with pytest.raises(WireError, match="no relayrl.kinds"):
        weights_from_bytes(save(arrays, metadata={"other": "1"}))
    with pytest.raises(WireError, match="does not describe"):
        weights_from_bytes(save(arrays, metadata={"relayrl.kinds": json.dumps({"v": "array"})}))
    with pytest.raises(WireError, match="does not describe"):
        weights_from_bytes(save(arrays, metadata={"relayrl.kinds": json.dumps({"w": "pickle"})}))
    with pytest.raises(WireError, match="not a map"):
        weights_from_bytes(save(arrays, metadata={"relayrl.kinds": json.dumps(["w"])}))
    with pytest.raises(WireError, match="do not match"):  # an "int" with no element to read
        weights_from_bytes(save({"w": np.zeros(0)}, metadata={"relayrl.kinds": json.dumps({"w": "int"})}))
    for bad in (b"", b"short", (10**9).to_bytes(8, "little") + b"{}", b"\x10" + b"\0" * 7 + b"[" * 16,
                len(b"[" * 200_000).to_bytes(8, "little") + b"[" * 200_000):  # deep nesting: no RecursionError
        with pytest.raises(WireError):
            weights_from_bytes(bad)
    good = weights_to_bytes({"w": np.ones(3)})
    with pytest.raises(WireError):
        weights_from_bytes(good[:-4])  # truncated tensor data


_FIELDS = ["proto", "type", "sender", "incarnation", "seq", "version", "arrays", "blob", "meta", "x"]
_value = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text(max_size=8)
                      | st.binary(max_size=8),
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_FIELDS), inner,
                                                                                  max_size=4), max_leaves=12)
_frame = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda h: msgpack.packb(h, use_bin_type=True), _value),
    st.builds(lambda k, v: _header(**{k: v}), st.sampled_from(_FIELDS), _value),  # one valid header field spoilt
    st.builds(lambda kind, arrays, blob: _header(type=kind, arrays=arrays, blob=blob),
              st.sampled_from(sorted(wire.TYPES) + ["bogus"]),
              st.lists(st.lists(st.one_of(st.text(max_size=3), st.sampled_from(sorted(wire.DTYPES) + ["|O"]),
                                          st.lists(st.integers(-2, 2**33), max_size=3), st.integers(-2**63, 2**63)),
                                max_size=3), max_size=3),
              st.booleans()),
)


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(_frame, max_size=5))
def test_decode_of_arbitrary_frames_returns_a_message_or_raises_wire_error(frames):
    try:
        msg = decode(frames)
    except WireError:
        return
    assert isinstance(msg, Message) and msg.type in wire.TYPES
    assert all(isinstance(a, np.ndarray) and not a.flags.writeable for a in msg.arrays.values())


@settings(max_examples=100, deadline=None)
@given(blob=st.binary(max_size=200))
def test_weights_from_arbitrary_bytes_returns_weights_or_raises_wire_error(blob):
    try:
        weights_from_bytes(blob)
    except WireError:
        pass


def test_one_body_frame_carries_the_arrays_each_at_an_aligned_offset():
    arrays = {"flags": np.array([True, False, True]), "x": np.arange(3, dtype=np.float64),
              "small": np.arange(5, dtype=np.int16)}
    frames = _bytes(encode(wire.SAMPLES, arrays=arrays))
    assert len(frames) == 2  # header + body, whatever the number of arrays
    assert frames[1][:3] == b"\x01\x00\x01" and frames[1][3:8] == bytes(5)  # x starts at 8: zero padding
    assert len(frames[1]) == 8 + 24 + 10
    msg = decode(frames)
    np.testing.assert_array_equal(msg.arrays["x"], arrays["x"])
    np.testing.assert_array_equal(msg.arrays["small"], arrays["small"])


def test_the_relays_decode_checks_the_layout_without_building_arrays():
    frames = _bytes(encode(wire.SAMPLES, sender="w", seq=3, arrays={"x": np.arange(6, dtype=np.float32)},
                           meta={"env_steps": 6}))
    msg = decode(frames, arrays=False)
    assert (msg.type, msg.sender, msg.seq, msg.meta, msg.arrays) == (wire.SAMPLES, "w", 3, {"env_steps": 6}, {})
    with pytest.raises(WireError, match="body frame has 23 bytes, its arrays need 24"):
        decode([frames[0], frames[1][:-1]], arrays=False)
    twice = _header(arrays=[["x", "<f4", [1]], ["x", "<f4", [1]]])
    with pytest.raises(WireError, match="described twice"):
        decode([twice, bytes(12)], arrays=False)
