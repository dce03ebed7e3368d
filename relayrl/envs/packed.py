"""Dict (and Tuple) observations packed into one uint8 row, so every store stays one array.

Rollouts, replay, the shared-memory env managers, the relay's chunks and checkpoints all hold one
observation array per step. A Dict observation is packed into one row of bytes at the env boundary
(``PackDict``, which ``relayrl.envs.make`` applies to any env with a Dict or Tuple observation): each
key's raw bytes side by side, in the space's order. uint8 images stay their bytes (no float copy
anywhere before the learner's batch), floats are stored as their 4 float32 bytes (exact; float64 is
narrowed to float32 as data/dtypes.py does for every observation), integers keep their dtype, bool
becomes one byte 0/1.

``PackedDict`` is the packed observation space: a rank-1 uint8 ``Box`` (what every store, the wire's
schema checks and the shared-memory managers see) that remembers the Dict (``space``) and where each
key lies (``fields``). The policy's encoder unpacks a batch by slicing and reinterpreting the bytes
(policy/packed.py), then runs one encoder per key. ``pack`` accepts one observation or a batch of
them, so ``policy.predict(dict_obs)`` takes the Dict as the env returns it. Byte order is the
machine's (little-endian on every platform relayrl runs on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.envs import spaces as leaf_spaces
from relayrl.errors import EnvError

__all__ = ["Field", "PackedDict", "PackDict", "packable", "field_name"]

PACKABLE = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)


@dataclass(frozen=True)
class Field:
    """One leaf of the packed space: its key path, name, own space, packed shape and dtype, byte range."""

    path: tuple[Any, ...]
    name: str  # "image", "nested[0]", "a.b"
    space: gym.Space
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int
    nbytes: int


def field_name(path: tuple[Any, ...]) -> str:
    """A key path as people write it: ``a.b`` for nested Dict keys, ``[i]`` for Tuple positions."""
    name = ""
    for part in path:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def packable(space: gym.Space) -> bool:
    """Whether ``space`` is one an env boundary packs (a Dict or a Tuple)."""
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)) and not isinstance(space, PackedDict)


def _packed_dtype(space: gym.Space) -> np.dtype:
    dtype = np.dtype(space.dtype or np.int64)
    if dtype.kind == "f":
        return np.dtype(np.float32)
    if dtype.kind == "b":
        return np.dtype(np.uint8)
    return dtype


def _fields(space: gym.Space) -> list[Field]:
    fields: list[Field] = []
    offset = 0

    def walk(sub: gym.Space, path: tuple[Any, ...]) -> None:
        nonlocal offset
        if isinstance(sub, gym.spaces.Dict):
            for key, child in sub.spaces.items():
                walk(child, (*path, key))
            return
        if isinstance(sub, gym.spaces.Tuple):
            for i, child in enumerate(sub.spaces):
                walk(child, (*path, i))
            return
        name = field_name(path)
        if not isinstance(sub, PACKABLE):
            raise EnvError(f"observation space {space}: key {name!r} is {sub}, which relayrl cannot store: the keys "
                           "of a Dict observation are Box, Discrete, MultiBinary or MultiDiscrete (or Dicts and "
                           "Tuples of those). Fix: drop the key (gymnasium.wrappers.FilterObservation) or convert it "
                           "to an array with a wrapper")
        dtype = _packed_dtype(sub)
        if dtype.kind not in "iuf":
            raise EnvError(f"observation space {space}: key {name!r} has dtype {sub.dtype}: use numbers")
        shape = tuple(sub.shape) if not isinstance(sub, gym.spaces.Discrete) else ()
        nbytes = math.prod(shape) * dtype.itemsize
        fields.append(Field(path, name, sub, shape, dtype, offset, nbytes))
        offset += nbytes

    walk(space, ())
    if not fields:
        raise EnvError(f"observation space {space} has no keys: give the env an observation")
    return fields


class PackedDict(gym.spaces.Box):
    """A Dict or Tuple observation space as one row of ``nbytes`` uint8 (module docstring).

    ``space`` is the original Dict, ``fields`` its leaves in packing order. ``pack(value)`` turns one
    observation (or a batch: the Dict's arrays with a leading batch axis) into its row(s),
    ``unpack(rows)`` gives the Dict of arrays back.
    """

    def __init__(self, space: gym.spaces.Dict | gym.spaces.Tuple, seed: int | None = None):
        if not isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)) or isinstance(space, PackedDict):
            raise EnvError(f"PackedDict packs a Dict or Tuple observation space, not {space}")
        fields = _fields(space)
        self.space = space
        self.fields = tuple(fields)
        self.nbytes = fields[-1].offset + fields[-1].nbytes
        super().__init__(0, 255, (self.nbytes,), np.uint8, seed=seed)

    def pack(self, value: Any) -> np.ndarray:
        """The packed row of one observation ([nbytes]), or rows of a batch ([n, nbytes])."""
        values = leaf_spaces.flatten(self.space, value)
        first = np.asarray(values[0])
        batch = first.shape[:first.ndim - len(self.fields[0].shape)]
        out = np.empty((*batch, self.nbytes), dtype=np.uint8)
        for field, v in zip(self.fields, values):
            array = np.asarray(v)
            if array.shape != (*batch, *field.shape):
                raise EnvError(f"observation key {field.name!r} has shape {array.shape}, expected {field.shape} "
                               f"(one observation) or (n, {', '.join(map(str, field.shape))}) (a batch of n, as the "
                               f"other keys) for {self.space}")
            array = np.ascontiguousarray(array, dtype=field.dtype).reshape((*batch, math.prod(field.shape)))
            out[..., field.offset:field.offset + field.nbytes] = array.view(np.uint8)
        return out

    def unpack(self, rows: np.ndarray) -> Any:
        """The Dict (or Tuple) of arrays packed in ``rows`` ([nbytes] or [n, nbytes]), in packed dtypes."""
        rows = np.asarray(rows)
        batch = rows.shape[:-1]
        arrays = [np.ascontiguousarray(rows[..., f.offset:f.offset + f.nbytes]).view(f.dtype).reshape((*batch, *f.shape))
                  for f in self.fields]
        return leaf_spaces.build(self.space, arrays)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        return self.pack(self.space.sample())

    def contains(self, x: Any) -> bool:
        array = np.asarray(x)
        return array.shape == self.shape and array.dtype == np.uint8

    def __repr__(self) -> str:
        return f"PackedDict({self.space})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, PackedDict) and self.space == other.space and self.fields == other.fields

    __hash__ = None  # type: ignore[assignment]  (as gymnasium's spaces: mutable, compared by value)


class PackDict(gym.ObservationWrapper):
    """An env whose Dict or Tuple observations are packed into one uint8 row (``PackedDict``)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = PackedDict(env.observation_space)

    def observation(self, observation: Any) -> np.ndarray:
        return self.observation_space.pack(observation)
