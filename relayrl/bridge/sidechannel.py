"""Side channels: messages multiplexed by a 16-byte channel id beside the RL data (spec §3.1).

Both sides register ``SideChannel`` objects; ``queue(payload)`` sends with the next hand-over and
``on_message(payload)`` receives. The built-in ids and payloads are ML-Agents' so existing
simulators' handlers read them. Statistics (since 1.2) go the other way: the simulator's
``StatsRecorder`` (``World.stats``) sends named scalars, the trainer's ``StatsChannel`` aggregates
them until ``drain()`` (one metrics row: ``sim/<name>``).
"""

from __future__ import annotations

import logging
import math
import struct
import uuid
from typing import Callable, Iterable

import numpy as np

from relayrl.bridge import layout as L
from relayrl.bridge.errors import BridgeError

log = logging.getLogger(__name__)

ENGINE_CONFIGURATION = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
ENVIRONMENT_PARAMETERS = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
STATS = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")  # ML-Agents' StatsSideChannel (since 1.2)

# how the trainer combines a stat's records between two metrics rows (ML-Agents' StatsAggregationMethod
# values; its 3, a histogram, is not taken)
AVERAGE, MOST_RECENT, SUM = 0, 1, 2
AGGREGATIONS = {"average": AVERAGE, "most_recent": MOST_RECENT, "sum": SUM}
STAT_NAME_BYTES = 128
FLOAT32_MAX = float(np.finfo(np.float32).max)


class SideChannel:
    """A user channel: subclass and override ``on_message``, or pass ``handler``."""

    def __init__(self, channel_id: uuid.UUID | str, handler: Callable[[bytes], None] | None = None):
        self.channel_id = uuid.UUID(str(channel_id))
        self.handler = handler
        self.outgoing: list[bytes] = []
        self.received: list[bytes] = []

    def queue(self, payload: bytes) -> None:
        self.outgoing.append(bytes(payload))

    def on_message(self, payload: bytes) -> None:
        if self.handler is not None:
            self.handler(payload)
        else:
            self.received.append(payload)


class EngineConfigurationChannel(SideChannel):
    """Screen resolution, quality level, time scale (1 to 100), target and capture frame rates."""

    def __init__(self):
        super().__init__(ENGINE_CONFIGURATION)

    def set_configuration(self, *, width: int | None = None, height: int | None = None, quality_level: int | None = None,
                          time_scale: float | None = None, target_frame_rate: int | None = None,
                          capture_frame_rate: int | None = None) -> None:
        if (width is None) != (height is None):
            raise ValueError("give width and height together")
        if width is not None:
            self.queue(struct.pack("<iii", 0, width, height))
        if quality_level is not None:
            self.queue(struct.pack("<ii", 1, quality_level))
        if time_scale is not None:
            self.queue(struct.pack("<if", 2, min(100.0, max(1.0, time_scale))))
        if target_frame_rate is not None:
            self.queue(struct.pack("<ii", 3, target_frame_rate))
        if capture_frame_rate is not None:
            self.queue(struct.pack("<ii", 4, capture_frame_rate))

    @staticmethod
    def decode(payload: bytes) -> tuple[str, tuple]:
        kind = struct.unpack_from("<i", payload)[0]
        names = {0: ("screen_resolution", "<ii"), 1: ("quality_level", "<i"), 2: ("time_scale", "<f"),
                 3: ("target_frame_rate", "<i"), 4: ("capture_frame_rate", "<i")}
        if kind not in names:
            raise ValueError(f"unknown engine configuration message type {kind}")
        name, fmt = names[kind]
        return name, struct.unpack_from(fmt, payload, 4)


class EnvironmentParametersChannel(SideChannel):
    """Named float parameters for the simulator (curriculum, randomisation)."""

    def __init__(self):
        super().__init__(ENVIRONMENT_PARAMETERS)

    def set_float_parameter(self, key: str, value: float) -> None:
        raw = key.encode()
        self.queue(struct.pack("<i", len(raw)) + raw + struct.pack("<if", 0, value))

    @staticmethod
    def decode(payload: bytes) -> tuple[str, float]:
        (n,) = struct.unpack_from("<i", payload)
        key = payload[4:4 + n].decode()
        kind, value = struct.unpack_from("<if", payload, 4 + n)
        if kind != 0:
            raise ValueError(f"environment parameter {key!r} has value type {kind}; only 0 (float) is defined")
        return key, value


def stat_problem(name: str, value: float, aggregation: str) -> str | None:
    """What is wrong with a stat a simulator is about to send, or None (the SDKs refuse it at the call)."""
    if not isinstance(name, str):
        return f"a stat's name is a str, not {type(name).__name__}"
    raw = name.encode("utf-8", "surrogatepass")
    if not 1 <= len(raw) <= STAT_NAME_BYTES or "\0" in name:
        return f"stat name {name[:40]!r} is {len(raw)} bytes: give 1 to {STAT_NAME_BYTES} bytes of UTF-8 without NUL"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"stat name {name[:40]!r} is not valid UTF-8 (a lone surrogate)"
    if aggregation not in AGGREGATIONS:
        return f"stat {name!r}: aggregation {aggregation!r} is not one of {sorted(AGGREGATIONS)}"
    if not isinstance(value, (int, float, np.number)) or not abs(float(value)) <= FLOAT32_MAX:
        return f"stat {name!r}: value {value!r} is not a finite float32"
    return None


def encode_stat(name: str, value: float, aggregation: str = "average") -> bytes:
    """One stats record's payload (§3.1): i32 key length k, k bytes UTF-8, f32 value, i32 aggregation."""
    problem = stat_problem(name, value, aggregation)
    if problem:
        raise BridgeError(problem)
    raw = name.encode()
    return struct.pack("<i", len(raw)) + raw + struct.pack("<fi", value, AGGREGATIONS[aggregation])


def decode_stat(payload: bytes) -> tuple[str, float, int]:
    """(name, value, aggregation) of a stats record; ``LayoutError`` naming what is wrong (a protocol error)."""
    head = "the simulator's stats record"
    if len(payload) < 4:
        raise L.LayoutError(f"{head} is {len(payload)} bytes, too short for its name's length (n = k + 12)")
    (k,) = struct.unpack_from("<i", payload)
    if not 1 <= k <= STAT_NAME_BYTES:
        raise L.LayoutError(f"{head} gives a name of {k} bytes; names are 1 to {STAT_NAME_BYTES} bytes")
    if len(payload) != k + 12:
        raise L.LayoutError(f"{head} with a {k}-byte name is {len(payload)} bytes, not k + 12 = {k + 12}")
    raw = payload[4:4 + k]
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise L.LayoutError(f"{head} has a name that is not UTF-8 ({raw[:40]!r})") from None
    if "\0" in name:
        raise L.LayoutError(f"{head} has a name with a NUL byte ({name[:40]!r})")
    value, aggregation = struct.unpack_from("<fi", payload, 4 + k)
    if aggregation not in AGGREGATIONS.values():
        raise L.LayoutError(f"{head} for {name!r} has aggregation {aggregation}; 0 (average), 1 (most recent) and "
                            "2 (sum) are defined")
    if not math.isfinite(value):
        raise L.LayoutError(f"{head} for {name!r} has the value {value}; stats are finite")
    return name, float(value), aggregation


class StatsRecorder(SideChannel):
    """The simulator's end of the stats channel (``World.stats``): ``record(name, value, aggregation)``.
    Records go out with the next hand-over; a trainer older than 1.2 takes none, and nothing is sent."""

    def __init__(self):
        super().__init__(STATS)
        self.enabled = True  # set at attach from the trainer's version

    def record(self, name: str, value: float, aggregation: str = "average") -> bool:
        """Queue one value of stat ``name`` (aggregation "average", "most_recent" or "sum": how the
        trainer combines the values it gets between two metrics rows; one aggregation per name). A bad
        name, value or aggregation raises BridgeError here. Returns False when the trainer (1.0, 1.1)
        takes no stats, so nothing was queued."""
        payload = encode_stat(name, value, aggregation)
        if self.enabled:
            self.queue(payload)
        return self.enabled


class StatsChannel(SideChannel):
    """The trainer's end of the stats channel: aggregates every record (average, most recent or sum,
    as the simulator asked) until ``drain()`` returns one value per name and starts over."""

    NAMES = ("average", "most recent", "sum")

    def __init__(self):
        super().__init__(STATS)
        self.aggregation: dict[str, int] = {}  # each name's, for the life of the channel
        self._values: dict[str, list[float]] = {}  # since the last drain: [sum, count, last]

    def on_message(self, payload: bytes) -> None:
        name, value, aggregation = decode_stat(payload)
        known = self.aggregation.setdefault(name, aggregation)
        if known != aggregation:
            raise L.LayoutError(f"the simulator's stats record for {name!r} asks for aggregation {aggregation} "
                                f"({self.NAMES[aggregation]}), earlier ones for {known} ({self.NAMES[known]}): one "
                                "aggregation per name")
        entry = self._values.setdefault(name, [0.0, 0, 0.0])
        entry[0] += value
        entry[1] += 1
        entry[2] = value

    def drain(self) -> dict[str, float]:
        """Each name's value since the last drain (names without records are left out)."""
        out = {}
        for name, (total, count, last) in self._values.items():
            kind = self.aggregation[name]
            out[name] = total / count if kind == AVERAGE else last if kind == MOST_RECENT else total
        self._values = {}
        return out


class SideChannels:
    """The channels of one side, by id: collects outgoing records, dispatches incoming ones."""

    def __init__(self, channels: Iterable[SideChannel] = ()):
        self.by_id: dict[uuid.UUID, SideChannel] = {}
        self.warned: set[uuid.UUID] = set()  # unknown ids already warned about (once each, as the C SDK)
        for channel in channels:
            self.add(channel)

    def add(self, channel: SideChannel) -> None:
        if channel.channel_id in self.by_id:
            raise ValueError(f"side channel {channel.channel_id} is registered twice")
        self.by_id[channel.channel_id] = channel

    def outgoing(self) -> bytes:
        records = []
        for channel in self.by_id.values():
            records.extend((channel.channel_id, payload) for payload in channel.outgoing)
            channel.outgoing.clear()
        return L.encode_records(records)

    def dispatch(self, payload: bytes) -> None:
        for channel_id, message in L.decode_records(payload):
            channel = self.by_id.get(channel_id)
            if channel is None:
                if channel_id not in self.warned:
                    self.warned.add(channel_id)
                    hint = " (the simulator's stats: add a StatsChannel to receive them)" if channel_id == STATS else ""
                    log.warning("side-channel messages for unknown channel %s are ignored%s", channel_id, hint)
            else:
                channel.on_message(message)
