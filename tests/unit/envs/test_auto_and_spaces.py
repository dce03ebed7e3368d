import os

import gymnasium as gym
import numpy as np
import pytest

from relayrl.envs import spaces
from relayrl.envs.auto import choose_manager
from relayrl.errors import EnvError

NESTED = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,), np.float32),
                          "b": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.MultiBinary(4)))})


def test_leaves_build_and_flatten_round_trip():
    leaves = spaces.leaves(NESTED)
    assert [leaf.path for leaf in leaves] == [("a",), ("b", 0), ("b", 1)]
    assert [leaf.shape for leaf in leaves] == [(2,), (), (4,)]
    arrays, tree = spaces.allocate(NESTED, 5)
    assert tree["a"].shape == (5, 2) and tree["b"][1].dtype == np.int8
    sample = NESTED.sample()
    values = spaces.flatten(NESTED, sample)
    for array, value in zip(arrays, values):
        array[3] = value
    rebuilt = spaces.copy_batch(NESTED, arrays, 3)
    np.testing.assert_array_equal(rebuilt["a"], sample["a"])
    assert rebuilt["b"][0] == sample["b"][0]
    rebuilt["a"][0] = 9  # a copy: the source arrays are untouched
    assert arrays[0][3, 0] != 9


def test_unsupported_space_is_refused_clearly():
    with pytest.raises(EnvError, match="not supported"):
        spaces.leaves(gym.spaces.Text(5))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to consider workers")
def test_auto_picks_sync_for_cheap_envs_and_subproc_for_costly_ones():
    assert choose_manager("CartPole-v1", 8) == ("sync", 1)
    manager, workers = choose_manager("relayrl.testing.envs:relayrl-test/SlowCartPole-v0", 8)
    assert manager == "subproc" and workers >= 2
    assert choose_manager("relayrl.testing.envs:relayrl-test/SlowCartPole-v0", 8, workers=1) == ("sync", 1)
