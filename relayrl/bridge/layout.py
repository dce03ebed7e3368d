"""Byte layout of the bridge protocol (docs/bridge-protocol.md is the specification).

Pure functions and small value types, no I/O: the header fields, the behaviour spec and the offsets
of every array in a behaviour section, and the side-channel record framing.
"""

from __future__ import annotations

import math
import struct
import uuid
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"RLRLBRDG"
VERSION = (1, 2)
HEADER_SIZE = 64
INITIAL_SIDE = 64  # S at creation
INITIAL_RL = 8  # R at creation: a behaviour count of 0
MAX_AGENTS = 1 << 24
MAX_OBS = 16
MAX_BRANCHES = 64
MAX_CONTINUOUS = 65536
NAME_BYTES = 64

# header field offsets
OFF_MAGIC, OFF_TRAINER_VERSION, OFF_SIM_VERSION, OFF_TURN = 0, 8, 12, 16
OFF_RESET, OFF_QUERY, OFF_TRAINER_CLOSED, OFF_SIM_CLOSED = 24, 25, 26, 27
OFF_GENERATION, OFF_SIDE, OFF_RL, OFF_TRAINER_PID, OFF_SIM_PID = 28, 32, 36, 40, 44
# since 1.1 (reserved, zero, in 1.0): each side's wait timeout in ms (0: none) and keep-alive counter (§2, §4)
OFF_TRAINER_TIMEOUT, OFF_SIM_TIMEOUT, OFF_TRAINER_ALIVE, OFF_SIM_ALIVE = 48, 52, 56, 60
KEEP_ALIVE_VERSION = (1, 1)  # the first version whose peers bump and honour the keep-alive counters
STATS_VERSION = (1, 2)  # the first trainer version that takes the simulator's stats records (§3.1)

# close reasons
NORMAL, VERSION_MISMATCH, TIMEOUT, PROTOCOL_ERROR, PEER_DIED = 1, 2, 3, 4, 5
REASONS = {NORMAL: "closed normally", VERSION_MISMATCH: "protocol version mismatch",
           TIMEOUT: "timed out waiting for its peer", PROTOCOL_ERROR: "protocol error (corrupt channel)",
           PEER_DIED: "saw its peer die"}

DTYPES = {1: np.dtype("<f4"), 2: np.dtype("u1")}
DTYPE_CODES = {np.dtype("<f4"): 1, np.dtype("u1"): 2}


def pad8(n: int) -> int:
    return (n + 7) & ~7


def timeout_ms(timeout_s: float | None) -> int:
    """A wait timeout as the header holds it (§2): milliseconds rounded up, 0 for none (``None``, 0 or
    less, infinite), at most 2^32 - 1."""
    if timeout_s is None or not timeout_s > 0 or math.isinf(timeout_s):
        return 0
    return min(math.ceil(timeout_s * 1000), 0xFFFFFFFF)


def new_header(trainer_pid: int, trainer_timeout_s: float | None = None) -> bytes:
    """The 64 header bytes at creation (turn 0, generation 1, S = 64, R = 8, the trainer's timeout)."""
    out = bytearray(HEADER_SIZE)
    out[0:8] = MAGIC
    struct.pack_into("<HH", out, OFF_TRAINER_VERSION, *VERSION)
    struct.pack_into("<III", out, OFF_GENERATION, 1, INITIAL_SIDE, INITIAL_RL)
    struct.pack_into("<i", out, OFF_TRAINER_PID, trainer_pid)
    struct.pack_into("<I", out, OFF_TRAINER_TIMEOUT, timeout_ms(trainer_timeout_s))
    return bytes(out)


@dataclass(frozen=True)
class ObsSpec:
    shape: tuple[int, ...]
    dtype: np.dtype = np.dtype("<f4")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


@dataclass(frozen=True)
class BehaviourSpec:
    """What a behaviour's agents observe and how they act (spec §3.3)."""

    name: str
    max_agents: int
    observations: tuple[ObsSpec, ...]
    continuous: int = 0
    branches: tuple[int, ...] = ()

    def __post_init__(self):
        encoded = self.name.encode()
        problems = []
        if not 1 <= len(encoded) <= NAME_BYTES or b"\0" in encoded:
            problems.append(f"the name must be 1 to {NAME_BYTES} bytes of UTF-8 without NUL")
        if not 1 <= self.max_agents <= MAX_AGENTS:
            problems.append(f"max agents must be in 1..{MAX_AGENTS}, not {self.max_agents}")
        if not 1 <= len(self.observations) <= MAX_OBS:
            problems.append(f"it needs 1 to {MAX_OBS} observations, not {len(self.observations)}")
        for k, obs in enumerate(self.observations):
            if not 1 <= len(obs.shape) <= 3 or min(obs.shape) < 1:
                problems.append(f"observation {k} has shape {obs.shape}: give 1 to 3 dims, each >= 1")
            if np.dtype(obs.dtype) not in DTYPE_CODES:
                problems.append(f"observation {k} has dtype {obs.dtype}: use float32 or uint8")
        if not 0 <= self.continuous <= MAX_CONTINUOUS or len(self.branches) > MAX_BRANCHES:
            problems.append(f"continuous size must be in 0..{MAX_CONTINUOUS}, branches at most {MAX_BRANCHES}")
        if self.continuous + len(self.branches) == 0:
            problems.append("it has no actions: give a continuous size or discrete branches")
        if any(b < 1 for b in self.branches):
            problems.append(f"branch sizes must be >= 1, not {list(self.branches)}")
        if problems:
            raise ValueError(f"behaviour {self.name!r}: " + "; ".join(problems))

    @property
    def mask_width(self) -> int:
        return sum(self.branches)


@dataclass
class SectionLayout:
    """Offsets (from the start of the body file) of everything in one behaviour section."""

    spec: BehaviourSpec
    start: int
    size: int
    n_decisions: int = 0
    decision_obs: list[int] = field(default_factory=list)
    decision_reward: int = 0
    decision_ids: int = 0
    decision_mask: int = 0
    n_terminations: int = 0
    final_obs: list[int] = field(default_factory=list)
    final_reward: int = 0
    interrupted: int = 0
    final_ids: int = 0
    continuous: int = 0
    discrete: int = 0


def spec_size(spec: BehaviourSpec) -> int:
    return pad8(80 + 16 * len(spec.observations) + 4 * len(spec.branches))


def layout(spec: BehaviourSpec, start: int) -> SectionLayout:
    """Where each array of ``spec``'s section lives when the section begins at ``start``."""
    n = spec.max_agents
    at = start + spec_size(spec)
    out = SectionLayout(spec=spec, start=start, size=0)

    def take(nbytes: int) -> int:
        nonlocal at
        where, at = at, at + pad8(nbytes)
        return where

    out.n_decisions = take(8)
    out.decision_obs = [take(n * o.nbytes) for o in spec.observations]
    out.decision_reward = take(4 * n)
    out.decision_ids = take(8 * n)
    out.decision_mask = take(n * spec.mask_width)
    out.n_terminations = take(8)
    out.final_obs = [take(n * o.nbytes) for o in spec.observations]
    out.final_reward = take(4 * n)
    out.interrupted = take(n)
    out.final_ids = take(8 * n)
    out.continuous = take(4 * n * spec.continuous)
    out.discrete = take(4 * n * len(spec.branches))
    out.size = at - start
    return out


def encode_spec(spec: BehaviourSpec, section_size: int) -> bytes:
    """The spec part of a section (§3.3), pad8 included."""
    out = bytearray(spec_size(spec))
    struct.pack_into("<IIHHI", out, 0, section_size, spec.max_agents, len(spec.observations),
                     len(spec.branches), spec.continuous)
    name = spec.name.encode()
    out[16:16 + len(name)] = name
    for k, obs in enumerate(spec.observations):
        dims = (*obs.shape, 0, 0, 0)[:3]
        struct.pack_into("<BBHIII", out, 80 + 16 * k, DTYPE_CODES[np.dtype(obs.dtype)], len(obs.shape), 0, *dims)
    base = 80 + 16 * len(spec.observations)
    for b, size in enumerate(spec.branches):
        struct.pack_into("<I", out, base + 4 * b, size)
    return bytes(out)


class LayoutError(ValueError):
    """The RL region does not parse: a corrupt or incompatible body."""


def parse_sections(body, side: int, rl: int) -> list[SectionLayout]:
    """Every behaviour section of the RL region ``[side, side + rl)`` of ``body``."""
    end = side + rl
    if rl < 8:
        raise LayoutError(f"RL region of {rl} bytes is too small")
    count, _ = struct.unpack_from("<II", body, side)
    at, sections = side + 8, []
    for index in range(count):
        if at + 80 > end:
            raise LayoutError(f"behaviour {index} starts at {at}, past the RL region's end {end}")
        size, n, k, b, c = struct.unpack_from("<IIHHI", body, at)
        raw = bytes(body[at + 16:at + 16 + NAME_BYTES]).split(b"\0", 1)[0]
        if not 1 <= k <= MAX_OBS or b > MAX_BRANCHES or at + 80 + 16 * k + 4 * b > end:
            raise LayoutError(f"behaviour {index} declares {k} observations and {b} branches")
        observations = []
        for j in range(k):
            code, rank, _, *dims = struct.unpack_from("<BBHIII", body, at + 80 + 16 * j)
            if code not in DTYPES or not 1 <= rank <= 3:
                raise LayoutError(f"behaviour {index} observation {j}: dtype code {code}, rank {rank}")
            observations.append(ObsSpec(tuple(dims[:rank]), DTYPES[code]))
        branches = struct.unpack_from(f"<{b}I", body, at + 80 + 16 * k)
        try:
            spec = BehaviourSpec(raw.decode(), n, tuple(observations), c, tuple(branches))
        except (ValueError, UnicodeDecodeError) as exc:
            raise LayoutError(f"behaviour {index}: {exc}") from None
        section = layout(spec, at)
        if section.size != size or at + size > end:
            raise LayoutError(f"behaviour {spec.name!r} declares {size} bytes, its spec needs {section.size} "
                              f"(region ends at {end})")
        sections.append(section)
        at += size
    return sections


def rl_size(specs: list[BehaviourSpec]) -> int:
    return 8 + sum(layout(s, 0).size for s in specs)


class SectionViews:
    """Full-size [N, ...] numpy views of one behaviour section; sliced to n rows per turn."""

    def __init__(self, body, section: SectionLayout):
        spec, n = section.spec, section.spec.max_agents
        self.section = section

        def array(offset: int, dtype, shape) -> np.ndarray:
            count = int(np.prod(shape))
            return np.frombuffer(body, dtype=dtype, count=count, offset=offset).reshape(shape)

        self.counts = array(section.n_decisions, "<u4", (1,))
        self.final_counts = array(section.n_terminations, "<u4", (1,))
        self.obs = [array(at, o.dtype, (n, *o.shape)) for at, o in zip(section.decision_obs, spec.observations)]
        self.reward = array(section.decision_reward, "<f4", (n,))
        self.ids = array(section.decision_ids, "<i8", (n,))
        self.mask = array(section.decision_mask, "u1", (n, spec.mask_width)).view(bool)
        edges = np.cumsum((0, *spec.branches))
        self.masks = [self.mask[:, a:b] for a, b in zip(edges[:-1], edges[1:])]
        self.final_obs = [array(at, o.dtype, (n, *o.shape)) for at, o in zip(section.final_obs, spec.observations)]
        self.final_reward = array(section.final_reward, "<f4", (n,))
        self.interrupted = array(section.interrupted, "u1", (n,)).view(bool)
        self.final_ids = array(section.final_ids, "<i8", (n,))
        self.continuous = array(section.continuous, "<f4", (n, spec.continuous))
        self.discrete = array(section.discrete, "<i4", (n, len(spec.branches)))


def section_views(body, side: int, rl: int) -> dict[str, SectionViews]:
    """Views of every behaviour section of a body, by behaviour name."""
    return {s.spec.name: SectionViews(body, s) for s in parse_sections(body, side, rl)}


# ---- side channel (§3.1)

def encode_records(records: list[tuple[uuid.UUID, bytes]]) -> bytes:
    return b"".join(channel.bytes_le + struct.pack("<I", len(payload)) + payload for channel, payload in records)


def decode_records(payload: bytes | memoryview) -> list[tuple[uuid.UUID, bytes]]:
    out, at = [], 0
    while at < len(payload):
        if at + 20 > len(payload):
            raise LayoutError(f"side-channel record at {at} is cut short ({len(payload) - at} bytes left)")
        channel = uuid.UUID(bytes_le=bytes(payload[at:at + 16]))
        (length,) = struct.unpack_from("<I", payload, at + 16)
        if at + 20 + length > len(payload):
            raise LayoutError(f"side-channel record at {at} claims {length} bytes, only "
                              f"{len(payload) - at - 20} follow")
        out.append((channel, bytes(payload[at + 20:at + 20 + length])))
        at += 20 + length
    return out


def grown_side(length: int) -> int:
    """S' for a side-channel payload of ``length`` bytes (§7)."""
    return pad8(2 * (length + 4))
