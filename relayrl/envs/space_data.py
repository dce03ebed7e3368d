"""Gymnasium spaces as plain data, so a worker can tell the trainer what its env looks like.

    data = space_to_data(env.observation_space)   # {"type": "Box", "dtype": "float32", "shape": [4], ...}
    space = space_from_data(data)                   # == env.observation_space

The data is JSON-able (and msgpack-able): dicts, lists, strings, numbers. Supported: ``Box``
(``dtype``, ``shape``, ``low`` and ``high`` each a scalar when uniform, else nested lists of the
space's shape; infinite bounds as the strings ``"inf"`` and ``"-inf"``), ``Discrete`` (``n``,
``start``), ``MultiDiscrete`` (``nvec``, ``start``, ``dtype``) and ``MultiBinary`` (``n``: an
integer or a shape), and a Dict or Tuple observation as relayrl packs it (envs/packed.py):
``{"type": "Dict", "spaces": [[key, space], ...]}`` or ``{"type": "Tuple", "spaces": [space, ...]}``
(a hybrid action, envs/hybrid.py: ``{"type": "Hybrid", "spaces": [Box, MultiDiscrete]}``),
nested at most ``MAX_NESTING`` levels with at most ``MAX_KEYS`` keys, which ``space_from_data``
returns as the ``PackedDict`` the worker's env has. Any other space is refused with ``EnvError`` by ``space_to_data`` (a worker's
env that cannot be described); ``space_from_data`` raises ``SpaceDataError`` for data that does
not describe a space (the trainer refuses such a chunk, cause ``spaces``). docs/wire-protocol.md
("Spaces") is the specification.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.envs.hybrid import hybrid_layout
from relayrl.envs.packed import PackedDict
from relayrl.errors import EnvError

# what relayrl can learn from and send: numpy's plain numeric dtypes, by name
DTYPES = {np.dtype(t).name: np.dtype(t) for t in
          (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
           np.float16, np.float32, np.float64)}
MAX_DIMS = 8
MAX_ELEMENTS = 2**22  # larger observations (16 MiB of float32) are not what a relay carries: a confused or hostile peer
SUPPORTED = "Box, Discrete, MultiDiscrete and MultiBinary, and Dicts and Tuples of those"
MAX_KEYS = 64  # of all Dicts and Tuples of one space together
MAX_NESTING = 4
MAX_KEY_CHARS = 64


class SpaceDataError(ValueError):
    """Data that does not describe a supported space; the text says what is wrong."""


def space_to_data(space: gym.Space) -> dict[str, Any]:
    """A JSON-able description of ``space``; EnvError for a space the relay cannot describe."""
    if isinstance(space, PackedDict):
        return _structure_to_data(space.space)
    if hybrid_layout(space) is not None:  # a hybrid action (envs/hybrid.py): the two parts, in order
        return {"type": "Hybrid", "spaces": [_leaf_to_data(sub) for sub in space.spaces]}
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        raise EnvError(f"the env's space {space} is a Dict or Tuple that was not packed: relayrl carries Dict "
                       "observations packed into one row, as relayrl.envs.make packs them; make the env with "
                       "relayrl.envs.make (or wrap it in relayrl.envs.packed.PackDict)")
    return _leaf_to_data(space)


def _structure_to_data(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Dict):
        keys = [key for key in space.spaces if not isinstance(key, str)]
        if keys:
            raise EnvError(f"the env's space {space} has keys {keys} that are not strings: the relay carries Dict "
                           "observations with string keys")
        return {"type": "Dict", "spaces": [[key, _structure_to_data(sub)] for key, sub in space.spaces.items()]}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [_structure_to_data(sub) for sub in space.spaces]}
    return _leaf_to_data(space)


def _leaf_to_data(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "dtype": _dtype_name(space), "shape": list(space.shape),
                "low": _bound(space.low), "high": _bound(space.high)}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist(),
                "dtype": _dtype_name(space)}
    if isinstance(space, gym.spaces.MultiBinary):
        n = space.n
        return {"type": "MultiBinary", "n": int(n) if np.ndim(n) == 0 else [int(d) for d in n]}
    raise EnvError(f"the env's space {space} cannot be described to the trainer: the relay carries {SUPPORTED}; "
                   "wrap the env to convert it to one of them")


def space_from_data(data: Any) -> gym.Space:
    """The space ``space_to_data`` described; SpaceDataError for anything else."""
    if isinstance(data, dict) and data.get("type") == "Hybrid":
        parts = data.get("spaces")
        if not isinstance(parts, list) or len(parts) != 2:
            raise SpaceDataError(f"a Hybrid's \"spaces\" are [Box, MultiDiscrete], got {str(parts)[:80]}")
        space = gym.spaces.Tuple([_leaf_from_data(part) for part in parts])
        if hybrid_layout(space) is None:
            raise SpaceDataError(f"a Hybrid holds a Box of one axis and a MultiDiscrete of one axis, got {space}")
        return space
    if isinstance(data, dict) and data.get("type") in ("Dict", "Tuple"):
        space = _structure_from_data(data, 0, [0])
        try:
            packed = PackedDict(space)
        except EnvError as exc:
            raise SpaceDataError(str(exc)) from None
        if packed.nbytes > MAX_ELEMENTS * 4:
            raise SpaceDataError(f"the Dict's observations take {packed.nbytes} bytes, more than {MAX_ELEMENTS * 4}")
        return packed
    return _leaf_from_data(data)


def _structure_from_data(data: Any, depth: int, count: list[int]) -> gym.Space:
    """A Dict or Tuple (nested at most MAX_NESTING deep, MAX_KEYS keys in all) or a leaf space."""
    if not isinstance(data, dict) or data.get("type") not in ("Dict", "Tuple"):
        return _leaf_from_data(data)
    if depth >= MAX_NESTING:
        raise SpaceDataError(f"Dict and Tuple spaces are nested deeper than {MAX_NESTING} levels")
    items = data.get("spaces")
    if not isinstance(items, list) or not items:
        raise SpaceDataError(f"a {data['type']}'s \"spaces\" must be a non-empty list, got {items!r}")
    count[0] += len(items)
    if count[0] > MAX_KEYS:
        raise SpaceDataError(f"Dict and Tuple spaces hold more than {MAX_KEYS} keys in all")
    if data["type"] == "Tuple":
        return gym.spaces.Tuple([_structure_from_data(sub, depth + 1, count) for sub in items])
    spaces: dict[str, gym.Space] = {}
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and 0 < len(item[0]) <= MAX_KEY_CHARS):
            raise SpaceDataError(f"a Dict's entries are [key, space] with a key of 1 to {MAX_KEY_CHARS} characters, "
                                 f"got {str(item)[:80]}")
        if item[0] in spaces:
            raise SpaceDataError(f"a Dict has key {item[0]!r} twice")
        spaces[item[0]] = _structure_from_data(item[1], depth + 1, count)
    return gym.spaces.Dict(OrderedDict(spaces))  # keys in the order sent (the packing order), not sorted


def _leaf_from_data(data: Any) -> gym.Space:
    if not isinstance(data, dict):
        raise SpaceDataError(f"a space is a map with a \"type\", got {type(data).__name__}")
    kind = data.get("type")
    if kind == "Box":
        dtype = _dtype(data)
        shape = _shape(data.get("shape"), "Box shape")
        low, high = _bound_array(data, "low", shape, dtype), _bound_array(data, "high", shape, dtype)
        if np.any(low > high):
            raise SpaceDataError("Box low must be <= high everywhere")
        try:
            return gym.spaces.Box(low, high, shape, dtype)
        except (ValueError, TypeError, OverflowError) as exc:
            raise SpaceDataError(f"not a valid Box: {exc}") from None
    if kind == "Discrete":
        n, start = _int(data.get("n"), "Discrete n", 1), _int(data.get("start", 0), "Discrete start")
        return gym.spaces.Discrete(n, start=start)
    if kind == "MultiDiscrete":
        nvec = _int_array(data.get("nvec"), "MultiDiscrete nvec", 1)
        start = _int_array(data.get("start", np.zeros_like(nvec).tolist()), "MultiDiscrete start")
        if start.shape != nvec.shape:
            raise SpaceDataError(f"MultiDiscrete start has shape {start.shape}, nvec {nvec.shape}")
        dtype = _dtype(data) if "dtype" in data else np.dtype(np.int64)
        if dtype.kind not in "iu":
            raise SpaceDataError(f"MultiDiscrete dtype must be an integer type, got {dtype}")
        try:
            return gym.spaces.MultiDiscrete(nvec, dtype=dtype, start=start)
        except (ValueError, TypeError, OverflowError) as exc:
            raise SpaceDataError(f"not a valid MultiDiscrete: {exc}") from None
    if kind == "MultiBinary":
        n = data.get("n")
        if isinstance(n, list):
            shape = _shape(n, "MultiBinary n")
            if not shape or min(shape) < 1:
                raise SpaceDataError(f"MultiBinary n must be a positive integer or a list of them, got {n!r}")
            return gym.spaces.MultiBinary(list(shape))
        return gym.spaces.MultiBinary(_int(n, "MultiBinary n", 1))
    raise SpaceDataError(f"unknown space type {kind!r} (the relay carries {SUPPORTED})")


# ---------------------------------------------------------------- helpers


def _dtype_name(space: gym.Space) -> str:
    dtype = np.dtype(space.dtype)
    if dtype.name not in DTYPES:
        raise EnvError(f"the env's space {space} has dtype {dtype}, which the relay does not carry (numbers "
                       f"only: {', '.join(DTYPES)})")
    return dtype.name


def _bound(values: np.ndarray) -> Any:
    """A scalar when every entry is the same, else nested lists; inf as the string "inf"."""
    flat = values.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return _number(flat[0])
    return _nested(values)


def _nested(values: np.ndarray) -> Any:
    if values.ndim == 0:
        return _number(values[()])
    return [_nested(v) for v in values]


def _number(x: Any) -> Any:
    x = x.item() if isinstance(x, np.generic) else x
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def _dtype(data: dict) -> np.dtype:
    name = data.get("dtype")
    if not isinstance(name, str) or name not in DTYPES:
        raise SpaceDataError(f"dtype {name!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _int(value: Any, what: str, low: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) >= 2**63:
        raise SpaceDataError(f"{what} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise SpaceDataError(f"{what} must be at least {low}, got {value}")
    return value


def _shape(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_DIMS:
        raise SpaceDataError(f"{what} must be a list of at most {MAX_DIMS} integers, got {value!r}")
    shape = tuple(_int(d, what, 0) for d in value)
    if math.prod(shape) > MAX_ELEMENTS:
        raise SpaceDataError(f"{what} {list(shape)} has more than {MAX_ELEMENTS} elements")
    return shape


def _scalar(x: Any, what: str, dtype: np.dtype) -> Any:
    """One bound as Python data: a float (inf allowed) for a float Box, an int in the dtype's range otherwise."""
    if dtype.kind == "f":
        if isinstance(x, str) and x in ("inf", "-inf"):
            return float(x)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and not (isinstance(x, float) and math.isnan(x)):
            return float(x)
        raise SpaceDataError(f"{what} holds {x!r}: bounds of a {dtype} Box are numbers or \"inf\" and \"-inf\"")
    if dtype.kind == "b":
        if isinstance(x, bool) or x in (0, 1):
            return bool(x)
        raise SpaceDataError(f"{what} holds {x!r}: bounds of a bool Box are true or false")
    info = np.iinfo(dtype)
    if not isinstance(x, int) or isinstance(x, bool) or not info.min <= x <= info.max:
        raise SpaceDataError(f"{what} holds {x!r}: bounds of a {dtype} Box are integers in [{info.min}, {info.max}]")
    return x


def _checked_lists(node: Any, what: str, leaf: Any, depth: int = 0) -> Any:
    """Nested lists with every leaf checked by ``leaf``; at most MAX_DIMS levels deep."""
    if isinstance(node, list):
        if depth >= MAX_DIMS:
            raise SpaceDataError(f"{what} is nested deeper than {MAX_DIMS} levels")
        return [_checked_lists(v, what, leaf, depth + 1) for v in node]
    return leaf(node)


def _bound_array(data: dict, key: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    value = data.get(key)
    what = f"Box {key}"
    if not isinstance(value, list):
        return np.full(shape, _scalar(value, what, dtype), dtype=dtype)

    nested = _checked_lists(value, what, lambda leaf: _scalar(leaf, what, dtype))
    try:
        array = np.array(nested, dtype=dtype)
    except (ValueError, OverflowError):  # ragged lists
        raise SpaceDataError(f"{what} is not a rectangular array") from None
    if array.shape != shape:
        raise SpaceDataError(f"{what} has shape {list(array.shape)}, the Box's shape is {list(shape)}")
    return array


def _int_array(value: Any, what: str, low: int | None = None) -> np.ndarray:
    if not isinstance(value, list):
        raise SpaceDataError(f"{what} must be a list of integers, got {value!r}")

    nested = _checked_lists(value, what, lambda leaf: _int(leaf, what, low))
    try:
        array = np.array(nested, dtype=np.int64)
    except (ValueError, OverflowError):
        raise SpaceDataError(f"{what} is not a rectangular array") from None
    if array.size == 0 or array.size > MAX_ELEMENTS:
        raise SpaceDataError(f"{what} must hold between 1 and {MAX_ELEMENTS} integers")
    return array
