"""Dict observations packed into one uint8 row (envs/packed.py): exact round trips, the env boundary
(relayrl.envs.make), the shared-memory managers carrying the rows as uint8, and keys relayrl cannot store."""

from __future__ import annotations

from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest

from relayrl.envs import make, make_vec
from relayrl.envs.packed import PackDict, PackedDict
from relayrl.errors import EnvError

DICT_OBS = "relayrl.testing.envs:relayrl-test/DictObs-v0"  # pos float64, mode Discrete, nested (MultiBinary, MultiDiscrete)
BANDIT = "relayrl.testing.envs:relayrl-test/DictBandit-v0"  # image uint8, cue float32, noise Discrete


def test_a_dict_packs_into_one_uint8_row_and_unpacks_exactly():
    space = PackedDict(make(DICT_OBS, pack_dict=False).observation_space)
    assert space.dtype == np.uint8 and space.shape == (8 + 8 * 2 + 5 + 3 * 4,)  # int64 mode, int64 x 2, int8 x 5, f4 x 3
    assert [f.name for f in space.fields] == ["mode", "nested[0]", "nested[1]", "pos"]
    value = {"mode": 3, "pos": np.array([0.1, -0.5, 1 / 3]), "nested": (np.array([1, 0, 1, 1, 0], np.int8),
                                                                        np.array([2, 6]))}
    row = space.pack(value)
    assert row.dtype == np.uint8 and row.shape == space.shape and space.contains(row)
    back = space.unpack(row)
    assert back["mode"] == 3 and back["nested"][1].tolist() == [2, 6] and back["nested"][0].dtype == np.int8
    np.testing.assert_array_equal(back["pos"], value["pos"].astype(np.float32))  # float64 stored as float32
    batch = {k: (np.stack([v, v]) if k != "nested" else tuple(np.stack([x, x]) for x in v)) for k, v in value.items()}
    rows = space.pack(batch)
    assert rows.shape == (2, *space.shape) and (rows == row).all()
    np.testing.assert_array_equal(space.unpack(rows)["pos"][1], back["pos"])


def test_keys_keep_the_order_of_the_space_and_spaces_of_another_order_differ():
    ordered = PackedDict(gym.spaces.Dict(OrderedDict([("z", gym.spaces.Discrete(2)), ("a", gym.spaces.Box(0, 1, (2,)))])))
    sorted_ = PackedDict(gym.spaces.Dict({"z": gym.spaces.Discrete(2), "a": gym.spaces.Box(0, 1, (2,))}))
    assert [f.name for f in ordered.fields] == ["z", "a"] and [f.name for f in sorted_.fields] == ["a", "z"]
    assert ordered != sorted_ and ordered == PackedDict(ordered.space)


def test_make_packs_a_dict_env_and_pack_dict_false_keeps_it():
    env = make(BANDIT)
    assert isinstance(env, PackDict) and isinstance(env.observation_space, PackedDict)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == env.observation_space.shape
    raw = make(BANDIT, pack_dict=False)
    raw_obs, _ = raw.reset(seed=0)
    assert isinstance(raw_obs, dict)
    np.testing.assert_array_equal(env.observation_space.unpack(obs)["image"], raw_obs["image"])  # pixels as bytes


def test_the_subproc_manager_carries_packed_rows_as_uint8_step_for_step():
    with make_vec(BANDIT, 4) as sync, make_vec(BANDIT, 4, manager="subproc", workers=2) as sub:
        assert sub.single_observation_space == sync.single_observation_space
        o1, o2 = sync.reset(seed=3), sub.reset(seed=3)
        assert o2.dtype == np.uint8
        np.testing.assert_array_equal(o1, o2)
        for _ in range(3):
            r1, r2 = sync.step(np.ones(4, np.int64)), sub.step(np.ones(4, np.int64))
            assert r2.obs.dtype == np.uint8 and r2.final_obs.dtype == np.uint8
            np.testing.assert_array_equal(r1.obs, r2.obs)
            np.testing.assert_array_equal(r1.final_obs, r2.final_obs)


def test_a_key_relayrl_cannot_store_is_refused_naming_it():
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "name": gym.spaces.Text(8)})
    with pytest.raises(EnvError, match=r"key 'name' is Text\(.*which relayrl cannot store: .*FilterObservation"):
        PackedDict(space)


def test_a_batch_whose_keys_disagree_is_refused_naming_the_key():
    space = PackedDict(gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)), "b": gym.spaces.Box(0, 1, (3,))}))
    with pytest.raises(EnvError, match=r"key 'b' has shape \(2, 2\), expected \(3,\)"):
        space.pack({"a": np.zeros((2, 2)), "b": np.zeros((2, 2))})


def test_an_empty_batch_packs_to_no_rows():
    space = PackedDict(gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)), "n": gym.spaces.Discrete(3)}))
    rows = space.pack({"a": np.zeros((0, 2)), "n": np.zeros(0, np.int64)})
    assert rows.shape == (0, space.nbytes) and space.unpack(rows)["a"].shape == (0, 2)
