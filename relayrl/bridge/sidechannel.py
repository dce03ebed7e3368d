"""Side channels: messages multiplexed by a 16-byte channel id beside the RL data (spec §3.1).

Both sides register ``SideChannel`` objects; ``queue(payload)`` sends with the next hand-over and
``on_message(payload)`` receives. The built-in ids and payloads are ML-Agents' so existing
simulators' handlers read them.
"""

from __future__ import annotations

import logging
import struct
import uuid
from typing import Callable, Iterable

from relayrl.bridge import layout as L

log = logging.getLogger(__name__)

ENGINE_CONFIGURATION = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
ENVIRONMENT_PARAMETERS = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")


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


class SideChannels:
    """The channels of one side, by id: collects outgoing records, dispatches incoming ones."""

    def __init__(self, channels: Iterable[SideChannel] = ()):
        self.by_id: dict[uuid.UUID, SideChannel] = {}
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
                log.warning("side-channel message for unknown channel %s ignored (%d bytes)", channel_id, len(message))
            else:
                channel.on_message(message)
