"""relayrl.envs.space_data: gymnasium spaces as JSON-able data and back (docs/wire-protocol.md, "Spaces")."""

from __future__ import annotations

import json

import gymnasium as gym
import msgpack
import numpy as np
import pytest

from relayrl.errors import EnvError
from relayrl.envs.space_data import SpaceDataError, space_from_data, space_to_data

I64 = np.iinfo(np.int64)

SPACES = {
    "CartPole obs (mixed finite and infinite bounds)": gym.make("CartPole-v1").observation_space,
    "Pendulum action": gym.make("Pendulum-v1").action_space,
    "image": gym.spaces.Box(0, 255, (84, 84, 3), np.uint8),
    "float64 box with per-entry bounds": gym.spaces.Box(np.array([[-1.0, -2.5], [0.0, -np.inf]]),
                                                        np.array([[1.0, 2.5], [0.5, np.inf]]), dtype=np.float64),
    "unbounded float32": gym.spaces.Box(-np.inf, np.inf, (7,), np.float32),
    "int64 box of extreme bounds": gym.spaces.Box(I64.min, I64.max, (2,), np.int64),
    "uint64 box": gym.spaces.Box(0, np.iinfo(np.uint64).max, (3,), np.uint64),
    "bool box": gym.spaces.Box(0, 1, (2,), bool),
    "float16 box": gym.spaces.Box(-1, 1, (2,), np.float16),
    "scalar box": gym.spaces.Box(-1.0, 1.0, (), np.float32),
    "Discrete": gym.spaces.Discrete(2),
    "Discrete with start": gym.spaces.Discrete(5, start=-2),
    "MultiDiscrete": gym.spaces.MultiDiscrete([3, 4, 2]),
    "MultiDiscrete 2-d with start": gym.spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[0, 1], [-1, 0]])),
    "MultiDiscrete int32": gym.spaces.MultiDiscrete([3, 4], dtype=np.int32),
    "MultiBinary": gym.spaces.MultiBinary(6),
    "MultiBinary shape": gym.spaces.MultiBinary([2, 3]),
}


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_a_space_round_trips_through_json_and_msgpack(space):
    data = space_to_data(space)
    for back in (json.loads(json.dumps(data, allow_nan=False)), msgpack.unpackb(msgpack.packb(data))):
        again = space_from_data(back)
        assert again == space and type(again) is type(space) and again.dtype == space.dtype
        if isinstance(space, gym.spaces.Box):
            np.testing.assert_array_equal(again.low, space.low)  # exactly, not just close
            np.testing.assert_array_equal(again.high, space.high)


def test_uniform_bounds_are_one_number():
    data = space_to_data(gym.spaces.Box(0, 255, (84, 84, 3), np.uint8))
    assert data == {"type": "Box", "dtype": "uint8", "shape": [84, 84, 3], "low": 0, "high": 255}
    data = space_to_data(gym.spaces.Box(-np.inf, np.inf, (3,), np.float32))
    assert data["low"] == "-inf" and data["high"] == "inf"


def test_a_space_the_relay_cannot_describe_is_refused_naming_the_fix():
    with pytest.raises(EnvError, match="Box, Discrete, MultiDiscrete and MultiBinary, and Dicts and Tuples of those; "
                                       "wrap the env to convert it"):
        space_to_data(gym.spaces.Text(5))


@pytest.mark.parametrize("space", [gym.spaces.Dict({"a": gym.spaces.Discrete(2)}),
                                   gym.spaces.Tuple([gym.spaces.Discrete(2)])], ids=["Dict", "Tuple"])
def test_a_dict_that_was_not_packed_is_refused_naming_the_fix(space):
    with pytest.raises(EnvError, match="was not packed: .* make the env with relayrl.envs.make"):
        space_to_data(space)


BOX = {"type": "Box", "dtype": "float32", "shape": [2], "low": -1.0, "high": 1.0}
BAD = [
    ("not a map", [1, 2], "a space is a map"),
    ("unknown type", {"type": "Graph"}, "unknown space type 'Graph'"),
    ("no type", {"n": 3}, "unknown space type None"),
    ("object dtype", {**BOX, "dtype": "object"}, "dtype 'object' is not one of"),
    ("shape not a list", {**BOX, "shape": 2}, "Box shape must be a list"),
    ("negative dim", {**BOX, "shape": [-1]}, "Box shape must be at least 0"),
    ("float dim", {**BOX, "shape": [2.0]}, "Box shape must be an integer"),
    ("too many dims", {**BOX, "shape": [1] * 9}, "at most 8 integers"),
    ("huge", {**BOX, "shape": [2**20, 2**20]}, "more than"),
    ("low of another shape", {**BOX, "low": [0.0, 0.0, 0.0]}, "Box low has shape [3], the Box's shape is [2]"),
    ("ragged", {**BOX, "shape": [2, 2], "low": [[0.0, 0.0], [0.0]]}, "not a rectangular array"),
    ("low above high", {**BOX, "low": 2.0}, "low must be <= high"),
    ("nan bound", {**BOX, "high": "nan"}, "bounds of a float32 Box are numbers"),
    ("string bound", {**BOX, "high": "big"}, "bounds of a float32 Box are numbers"),
    ("bool bound", {**BOX, "high": True}, "bounds of a float32 Box are numbers"),
    ("inf in an int box", {**BOX, "dtype": "int32", "high": "inf"}, "integers in [-2147483648, 2147483647]"),
    ("int out of range", {**BOX, "dtype": "uint8", "high": 256}, "integers in [0, 255]"),
    ("Discrete n 0", {"type": "Discrete", "n": 0}, "Discrete n must be at least 1"),
    ("Discrete n bool", {"type": "Discrete", "n": True}, "Discrete n must be an integer"),
    ("Discrete huge", {"type": "Discrete", "n": 2**70}, "Discrete n must be an integer"),
    ("MultiDiscrete empty", {"type": "MultiDiscrete", "nvec": []}, "between 1 and"),
    ("MultiDiscrete zero", {"type": "MultiDiscrete", "nvec": [2, 0]}, "nvec must be at least 1"),
    ("MultiDiscrete start shape", {"type": "MultiDiscrete", "nvec": [2, 3], "start": [0]}, "start has shape (1,)"),
    ("MultiDiscrete float dtype", {"type": "MultiDiscrete", "nvec": [2], "dtype": "float32"}, "an integer type"),
    ("MultiBinary empty", {"type": "MultiBinary", "n": []}, "positive integer or a list"),
    ("MultiBinary string", {"type": "MultiBinary", "n": "4"}, "MultiBinary n must be an integer"),
]


@pytest.mark.parametrize("data, says", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_data_that_describes_no_space_is_a_space_data_error(data, says):
    with pytest.raises(SpaceDataError) as info:
        space_from_data(data)
    assert says in str(info.value)


def test_a_hybrid_action_space_round_trips_and_a_malformed_one_is_refused():
    from relayrl.envs.hybrid import hybrid_space

    space = hybrid_space(2, (3, 4))
    data = space_to_data(space)
    assert data["type"] == "Hybrid" and space_from_data(data) == space
    with pytest.raises(SpaceDataError, match="Box of one axis and a MultiDiscrete"):
        space_from_data({"type": "Hybrid", "spaces": [data["spaces"][1], data["spaces"][0]]})
    with pytest.raises(SpaceDataError, match=r"\[Box, MultiDiscrete\]"):
        space_from_data({"type": "Hybrid", "spaces": [data["spaces"][0]]})
