"""Observation spaces as flat lists of fixed-shape arrays ("leaves"), so any supported space can live in
preallocated (shared) memory.

Supported: Box, Discrete, MultiBinary, MultiDiscrete, and Dict / Tuple nesting of those. A batch of
observations is the space's structure with one ``[n, *shape]`` array per leaf: an ndarray for a
plain space, a dict for Dict, a tuple for Tuple.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.errors import EnvError


@dataclass(frozen=True)
class Leaf:
    path: tuple[Any, ...]  # keys (Dict) and indices (Tuple) from the root
    shape: tuple[int, ...]
    dtype: np.dtype


def leaves(space: gym.Space, path: tuple[Any, ...] = ()) -> list[Leaf]:
    if isinstance(space, gym.spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in leaves(sub, (*path, key))]
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in leaves(sub, (*path, i))]
    if isinstance(space, gym.spaces.Discrete):
        return [Leaf(path, (), np.dtype(space.dtype or np.int64))]
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return [Leaf(path, tuple(space.shape), np.dtype(space.dtype))]
    raise EnvError(f"observation space {space} is not supported: use Box, Discrete, MultiBinary, "
                   "MultiDiscrete, or Dict/Tuple of those (or wrap the env to convert it)")


def build(space: gym.Space, arrays: list[np.ndarray]) -> Any:
    """Arrange one array per leaf (in ``leaves`` order) into the space's structure."""
    it = iter(arrays)

    def walk(sub: gym.Space) -> Any:
        if isinstance(sub, gym.spaces.Dict):
            return {key: walk(s) for key, s in sub.spaces.items()}
        if isinstance(sub, gym.spaces.Tuple):
            return tuple(walk(s) for s in sub.spaces)
        return next(it)

    return walk(space)


def flatten(space: gym.Space, value: Any) -> list[Any]:
    """The leaf values of one observation (or batch), in ``leaves`` order."""
    if isinstance(space, gym.spaces.Dict):
        return [v for key, sub in space.spaces.items() for v in flatten(sub, value[key])]
    if isinstance(space, gym.spaces.Tuple):
        return [v for i, sub in enumerate(space.spaces) for v in flatten(sub, value[i])]
    return [value]


def allocate(space: gym.Space, n: int) -> tuple[list[np.ndarray], Any]:
    """Zeroed ``[n, *shape]`` arrays per leaf, and the same arrays arranged as the space."""
    arrays = [np.zeros((n, *leaf.shape), dtype=leaf.dtype) for leaf in leaves(space)]
    return arrays, build(space, arrays)


def copy_batch(space: gym.Space, arrays: list[np.ndarray], index: Any = slice(None)) -> Any:
    """A structured copy of rows ``index`` of each leaf array (never aliases the source)."""
    return build(space, [a[index].copy() for a in arrays])


@dataclass(frozen=True)
class ImageLayout:
    channels_first: bool
    channels: int
    height: int
    width: int


def image_layout(shape: tuple[int, ...]) -> ImageLayout:
    """Where a rank-3 image keeps its channels: the smaller of the first and the last axis; ties are
    channels-last (MinAtar Seaquest's [10, 10, 10]). The CNN encoders and frame stacks both read it."""
    first, middle, last = shape
    if first < last:
        return ImageLayout(True, first, middle, last)
    return ImageLayout(False, last, first, middle)
