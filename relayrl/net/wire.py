"""The wire codec: one ZeroMQ multipart message = a msgpack header frame + one body frame of arrays.

    frames = encode(SAMPLES, sender="w-1a2b", incarnation=inc, seq=7, version=3, arrays=batch,
                    meta={"env_steps": 64})
    msg = decode(frames)     # Message(type, sender, seq, version, arrays, meta, blob, incarnation)

The header is a msgpack map (docs/wire-protocol.md is the specification):
``{"proto": 3, "type": str, "sender": str, "incarnation": int, "seq": int, "version": int,
"arrays": [[name, dtype, shape], ...], "blob": bool, "meta": {...}}``. With arrays, frame 1 (the
body) holds every array's bytes (C order, little-endian) back to back in descriptor order, each
starting at a multiple of ``ALIGN`` bytes (zero padding between); with ``blob`` one last frame
carries opaque bytes (weights as safetensors). One body frame rather than a frame per array: every
ZeroMQ frame costs each hop a send call (and, with CURVE, a box of its own), which dominated the
relay's time per chunk. Nothing is ever unpickled: msgpack decodes to plain data, arrays are rebuilt from a
whitelist of dtypes after checking that each frame has exactly the bytes its descriptor says, and
``decode`` raises only ``WireError`` for anything malformed, so a receiver can count and drop it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

PROTOCOL = 3  # 3: one body frame for all arrays; 2: the header's "incarnation" (docs/wire-protocol.md, "Changes")
REVISION = 3  # peers of every revision of a version work together (docs/wire-protocol.md, "Changes"; 3: weights pulls)
ALIGN = 8  # each array starts at a multiple of this many bytes in the body frame
MAX_MESSAGE_BYTES = 64 * 2**20  # default cap on one message (all frames); the relay's --max-message-mb

# Message types (the header's "type").
HELLO, WELCOME, REFUSED, REHELLO = "hello", "welcome", "refused", "rehello"
SAMPLES, ACK, WEIGHTS, GET_WEIGHTS = "samples", "ack", "weights", "get_weights"
PING, PONG, BYE = "ping", "pong", "bye"
TYPES = frozenset({HELLO, WELCOME, REFUSED, REHELLO, SAMPLES, ACK, WEIGHTS, GET_WEIGHTS, PING, PONG, BYE})

# dtype strings on the wire: numpy's little-endian spellings of the plain numeric types only.
DTYPES = {np.dtype(t).str: np.dtype(t) for t in
          (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
           np.float16, np.float32, np.float64)}
MAX_DIMS = 8
MAX_ARRAYS = 64
MAX_HEADER_BYTES = 64 * 1024
HEADER_KEYS = ("proto", "type", "sender", "incarnation", "seq", "version", "arrays", "blob", "meta")
INT64 = 2**63
# a refusal on an ack: [seq, cause, detail] (relay -> worker), [worker, incarnation, seq, cause, detail]
# (trainer -> relay); the cause is a short name, the detail a sentence naming the problem and the fix
MAX_CAUSE = 32
MAX_DETAIL = 600


class WireError(ValueError):
    """A message that does not follow the protocol; the text says what is wrong with it, ``cause``
    names the kind of problem in a word (counted per cause by the relay): ``proto`` (another protocol
    version), ``header``, ``arrays`` (descriptors or their frames), ``size``."""

    def __init__(self, message: str, cause: str = "header"):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class Message:
    type: str
    sender: str = ""
    seq: int = 0
    version: int = -1
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    blob: bytes | memoryview | None = None  # decoded: a read-only view of the frame (no copy)
    incarnation: int = 0  # the sender process's start stamp: (sender, incarnation, seq) names a chunk


def encode(type: str, *, sender: str = "", incarnation: int = 0, seq: int = 0, version: int = -1,
           arrays: dict[str, np.ndarray] | None = None, meta: dict[str, Any] | None = None,
           blob: bytes | None = None) -> list[bytes | memoryview]:
    """The frames of one message. Array frames are zero-copy views of C-contiguous arrays."""
    if type not in TYPES:
        raise ValueError(f"unknown message type {type!r}")
    if not 0 <= incarnation < INT64:
        raise ValueError(f"incarnation must be in [0, 2**63), got {incarnation}")
    if not 0 <= seq < INT64 or not -1 <= version < INT64:
        raise ValueError(f"seq must be in [0, 2**63) and version in [-1, 2**63), got {seq} and {version}")
    descriptors, frames, end = [], [], 0
    for name, value in (arrays or {}).items():
        array = np.asarray(value, order="C")  # (np.ascontiguousarray would turn a 0-d array into shape (1,))
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        if dtype.str not in DTYPES:
            raise ValueError(f"array {name!r} has dtype {array.dtype}, which the wire protocol does not carry "
                             f"(allowed: {', '.join(sorted(DTYPES))})")
        array = array.astype(dtype, copy=False)
        descriptors.append([name, dtype.str, list(array.shape)])
        if end % ALIGN:
            frames.append(_PADDING[:ALIGN - end % ALIGN])
            end += ALIGN - end % ALIGN
        frames.append(memoryview(array.reshape(-1).view(np.uint8)) if array.size else b"")
        end += array.nbytes
    return _frames(PROTOCOL, type, sender, incarnation, seq, version, descriptors, meta,
                   b"".join(frames) if descriptors else None, blob)


_PADDING = bytes(ALIGN)


def _frames(proto: int, type: str, sender: str, incarnation: int, seq: int, version: int, descriptors: list,
            meta: dict | None, body: bytes | None, blob: bytes | None) -> list[bytes | memoryview]:
    header = {"proto": proto, "type": type, "sender": sender, "incarnation": int(incarnation),
              "seq": int(seq), "version": int(version),
              "arrays": descriptors, "blob": blob is not None, "meta": meta or {}}
    out: list[bytes | memoryview] = [msgpack.packb(header, use_bin_type=True)]
    if body is not None:
        out.append(body)
    if blob is not None:
        out.append(blob)
    return out


def _view(frame: Any) -> memoryview:
    """A read-only view of a received frame (a zmq Frame's buffer, or bytes)."""
    return memoryview(frame.buffer if hasattr(frame, "buffer") else frame).toreadonly()


def refusal_for(proto: int, reason: str) -> list[bytes | memoryview]:
    """A ``refused`` message in protocol ``proto``'s header (a message without arrays is laid out
    alike in versions 2 and 3), so that a peer of another release can read why it is refused."""
    return _frames(proto, REFUSED, "", 0, 0, -1, [], {"reason": reason}, None, None)


def other_protocol_hello(frames: list) -> int | None:
    """The protocol version of a ``hello`` in another version than ours (None for anything else)."""
    try:
        header = msgpack.unpackb(_view(frames[0]), raw=False, strict_map_key=True)
    except Exception:  # (garbage: not a hello of anyone's)
        return None
    if not isinstance(header, dict) or header.get("type") != HELLO:
        return None
    proto = header.get("proto")
    return proto if type(proto) is int and proto != PROTOCOL and 1 <= proto < 2**16 else None


def _int(header: dict, key: str, low: int) -> int:
    """An integer header field in [low, 2**63) (msgpack carries up to 2**64 - 1: not an int64)."""
    value = header.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise WireError(f"header field {key!r} must be an integer, got {type(value).__name__}")
    if not low <= value < INT64:
        raise WireError(f"{key} {value} is outside [{low}, 2**63)")
    return value


def env_steps_problem(meta: dict) -> str | None:
    """What is wrong with a samples chunk's ``meta.env_steps`` (None: an integer in [0, 2**63))."""
    if "env_steps" not in meta:
        return "it has no meta.env_steps (the env steps the chunk's transitions took)"
    value = meta["env_steps"]
    if not isinstance(value, int) or isinstance(value, bool):
        return f"its meta.env_steps is {value!r} ({type(value).__name__}), not an integer"
    if not 0 <= value < INT64:
        return f"its meta.env_steps is {value}, outside [0, 2**63)"
    return None


def decode(frames: list, max_bytes: int = MAX_MESSAGE_BYTES, arrays: bool = True) -> Message:
    """Parse and validate one message (frames as bytes, memoryviews or zmq Frames). The arrays are
    read-only views of the body frame's buffer (copy to write).

    ``arrays=False`` (the relay, which forwards chunks as they came): the header and the array
    descriptors are checked in full, and that the body frame has exactly the bytes they describe,
    but no array is built (``Message.arrays`` is empty); the receiver's full decode builds them."""
    if not frames:
        raise WireError("empty message")
    buffers = [_view(f) for f in frames]
    total = sum(b.nbytes for b in buffers)
    if total > max_bytes:
        raise WireError(f"message of {total} bytes exceeds the limit of {max_bytes}", "size")
    if buffers[0].nbytes > MAX_HEADER_BYTES:
        raise WireError(f"header of {buffers[0].nbytes} bytes exceeds {MAX_HEADER_BYTES}", "size")
    try:
        header = msgpack.unpackb(buffers[0], raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types for garbage; all mean the same here
        raise WireError(f"header is not msgpack: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise WireError("header is not a map")
    proto = header.get("proto")
    if type(proto) is not int or proto != PROTOCOL:  # (2.0 == 2 in Python: the type is checked too)
        raise WireError(f"protocol version {proto!r}, this side speaks {PROTOCOL}: "
                        "run the same relayrl release on the relay, the trainer and the workers", "proto")
    missing = [key for key in HEADER_KEYS if key not in header]
    if missing:
        raise WireError(f"header lacks {', '.join(missing)}: every message carries all of "
                        f"{', '.join(HEADER_KEYS)}")
    kind = header.get("type")
    if not isinstance(kind, str) or kind not in TYPES:  # (an unhashable list or map would raise TypeError)
        raise WireError(f"unknown message type {kind!r}")
    sender, meta, descriptors = header["sender"], header["meta"], header["arrays"]
    if not isinstance(sender, str) or len(sender) > 256:
        raise WireError("sender must be a string of at most 256 characters")
    if not isinstance(meta, dict):
        raise WireError("meta must be a map")
    if not isinstance(descriptors, list) or len(descriptors) > MAX_ARRAYS:
        raise WireError(f"arrays must be a list of at most {MAX_ARRAYS} descriptors", "arrays")
    has_blob = header["blob"]
    if not isinstance(has_blob, bool):
        raise WireError(f"blob must be true or false, got {type(has_blob).__name__}")
    expected_frames = 1 + bool(descriptors) + has_blob
    if len(buffers) != expected_frames:
        raise WireError(f"{len(buffers)} frames, the header announces {expected_frames}", "arrays")
    layout, end = _layout(descriptors)
    if descriptors and buffers[1].nbytes != end:
        raise WireError(f"the body frame has {buffers[1].nbytes} bytes, its arrays need {end}", "arrays")
    built = {}
    if arrays and descriptors:
        body = buffers[1].toreadonly()  # (the frame's arrays are the message's: read-only, so nothing copies them)
        for name, dtype, shape, offset, size in layout:
            built[name] = np.frombuffer(body[offset:offset + size], dtype=dtype).reshape(shape)
    blob = buffers[-1].toreadonly() if has_blob else None  # a view: the relay forwards weights uncopied
    incarnation = _int(header, "incarnation", 0)  # (int64s, for a client in any language)
    return Message(kind, sender, _int(header, "seq", 0), _int(header, "version", -1), built, meta, blob, incarnation)


_LAYOUTS: dict[str, tuple[list, int]] = {}  # repr of valid descriptors -> their layout (a worker repeats its own)


def _layout(descriptors: list) -> tuple[list[tuple[str, np.dtype, list, int, int]], int]:
    """(name, dtype, shape, offset, size) of each array in the body frame, and the body's length.
    Valid layouts are cached by the descriptors' repr (msgpack decodes to plain types, whose repr
    tells any two values apart), since a sender's chunks mostly repeat one layout."""
    key = repr(descriptors)
    cached = _LAYOUTS.get(key)
    if cached is not None:
        return cached
    layout = _new_layout(descriptors)
    if len(key) <= 4096:  # (bounded memory: at most 256 layouts of a few KiB)
        if len(_LAYOUTS) >= 256:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


def _new_layout(descriptors: list) -> tuple[list[tuple[str, np.dtype, list, int, int]], int]:
    layout, end, names = [], 0, set()
    for descriptor in descriptors:
        name, dtype, shape, size = _descriptor(descriptor)
        if name in names:
            raise WireError(f"array {name!r} is described twice", "arrays")
        names.add(name)
        offset = -(-end // ALIGN) * ALIGN
        layout.append((name, dtype, shape, offset, size))
        end = offset + size
    return layout, end


def _descriptor(descriptor: Any) -> tuple[str, np.dtype, list, int]:
    if not (isinstance(descriptor, list) and len(descriptor) == 3):
        raise WireError("an array descriptor must be [name, dtype, shape]", "arrays")
    name, dtype_str, shape = descriptor
    if not isinstance(name, str) or not name:
        raise WireError("array name must be a non-empty string", "arrays")
    dtype = DTYPES.get(dtype_str) if isinstance(dtype_str, str) else None
    if dtype is None:
        raise WireError(f"array {name!r}: dtype {dtype_str!r} is not one the protocol carries", "arrays")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape)):
        raise WireError(f"array {name!r}: shape must be a list of at most {MAX_DIMS} non-negative integers",
                        "arrays")
    size = math.prod(shape) * dtype.itemsize  # Python ints: np.prod in int64 wraps around to a small number
    return name, dtype, shape, size


# ---------------------------------------------------------------- weights as safetensors bytes


def weights_to_bytes(weights: dict[str, Any]) -> bytes:
    """A policy's ``get_weights()`` tree as safetensors bytes (the tree's structure in its metadata)."""
    from safetensors.numpy import save

    from relayrl.runtime.weights import flatten

    arrays, kinds = flatten(weights)
    arrays = {k: np.asarray(v, order="C") for k, v in arrays.items()}  # keeps 0-d tensors 0-d
    return save(arrays, metadata={"relayrl.kinds": json.dumps(kinds)})


def weights_from_bytes(blob: bytes | memoryview) -> dict[str, Any]:
    """The inverse of ``weights_to_bytes``; raises WireError for bytes that are not such a file."""
    from safetensors.numpy import load

    from relayrl.runtime.weights import unflatten

    blob = bytes(blob)  # (safetensors and json want bytes; no copy if it already is)
    kinds = _kinds_from_header(blob)
    try:
        arrays = load(blob)
    except Exception as exc:  # safetensors raises its own error types for corrupt input
        raise WireError(f"weights are not a valid safetensors file: {exc}") from None
    if set(kinds) != set(arrays) or not all(v in ("tensor", "array", "int", "float") for v in kinds.values()):
        raise WireError("weights metadata does not describe the tensors it carries")
    try:
        return unflatten(arrays, kinds)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:  # e.g. an "int" of 0 elements
        raise WireError(f"weights do not match their metadata: {type(exc).__name__}: {exc}") from None


def _kinds_from_header(blob: bytes) -> dict[str, str]:
    """Read ``relayrl.kinds`` from the safetensors JSON header (8-byte length + JSON)."""
    if len(blob) < 8:
        raise WireError("weights blob is shorter than a safetensors header")
    size = int.from_bytes(blob[:8], "little")
    if size > len(blob) - 8 or size > MAX_HEADER_BYTES * 16:
        raise WireError("weights blob has a safetensors header longer than the blob")
    try:
        kinds = json.loads(json.loads(blob[8:8 + size])["__metadata__"]["relayrl.kinds"])
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: deeply nested JSON
        raise WireError("weights blob carries no relayrl.kinds metadata") from None
    if not isinstance(kinds, dict):
        raise WireError("weights metadata is not a map")
    return kinds
