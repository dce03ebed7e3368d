import numpy as np
import pytest
import torch

from relayrl.data.dtypes import store_transitions, stored_dtype, to_stored, to_tensor
from relayrl.data.rollout import RolloutStore
from relayrl.errors import EnvError


@pytest.mark.parametrize("given,stored", [
    (np.float64, np.float32), (np.float32, np.float32), (np.float16, np.float32), (np.uint8, np.uint8),
    (np.int16, np.int16), (np.int64, np.int64), (np.bool_, np.uint8)])
def test_stored_dtype(given, stored):
    assert stored_dtype(given) == np.dtype(stored)


def test_unusable_observation_dtypes_are_refused_clearly():
    with pytest.raises(EnvError, match="complex64 cannot be learned from"):
        stored_dtype(np.complex64)


def test_float64_is_stored_as_float32_and_uint8_is_kept_without_a_copy():
    obs = np.random.default_rng(0).normal(size=(4, 3))
    stored = to_stored(obs)
    assert stored.dtype == np.float32
    np.testing.assert_array_equal(stored, obs.astype(np.float32))
    image = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    assert to_stored(image) is image
    same = obs.astype(np.float32)
    assert to_stored(same) is same


def test_to_tensor_shares_float32_memory_and_casts_the_rest_without_scaling():
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    t = to_tensor(obs)
    assert t.dtype == torch.float32 and np.shares_memory(t.numpy(), obs)  # the float32 path does not copy
    image = np.array([[0, 7, 255]], dtype=np.uint8)
    assert to_tensor(image).dtype == torch.float32
    assert to_tensor(image).tolist() == [[0.0, 7.0, 255.0]]  # a plain cast: no scaling to [0, 1]
    assert to_tensor(np.array([True, False])).tolist() == [1.0, 0.0]
    assert to_tensor(np.ones((2, 2), np.float64)).dtype == torch.float32
    assert to_tensor(obs[::-1]).tolist() == obs[::-1].tolist()  # a reversed view (negative strides) is copied


def test_store_transitions_makes_floats_float32_and_leaves_the_rest():
    rng = np.random.default_rng(0)
    batch = {"obs": rng.normal(size=(3, 2)), "next_obs": rng.normal(size=(3, 2)), "reward": np.ones(3),
             "discount": np.full(3, 0.99), "action": rng.normal(size=(3, 1)), "terminated": np.zeros(3, bool),
             "version": np.arange(3)}
    out = store_transitions(batch)
    for key in ("obs", "next_obs", "reward", "discount", "action"):
        assert out[key].dtype == np.float32, key
        np.testing.assert_array_equal(out[key], batch[key].astype(np.float32))
    assert out["terminated"] is batch["terminated"] and out["version"] is batch["version"]
    assert batch["obs"].dtype == np.float64  # the caller's batch is left alone
    discrete = {"obs": np.zeros((3, 4, 4), np.uint8), "action": np.arange(3), "reward": np.ones(3, np.float32)}
    kept = store_transitions(discrete)
    assert all(kept[key] is discrete[key] for key in discrete)  # already stored: no copies


def test_bool_observations_are_stored_as_uint8_and_reach_the_learner_as_0_and_1():
    """A quarter of float32's replay memory for MinAtar's planes, and the learner's tensor is unchanged."""
    from relayrl.data.replay import ReplayBuffer

    planes = np.random.default_rng(0).random((6, 10, 10, 4)) > 0.5
    batch = store_transitions({"obs": planes, "next_obs": ~planes, "action": np.arange(6), "reward": np.ones(6)})
    assert batch["obs"].dtype == batch["next_obs"].dtype == np.uint8
    buffer = ReplayBuffer(8, seed=0)
    buffer.add(batch)
    assert buffer.storage.arrays["obs"].dtype == np.uint8
    sample = buffer.sample(16)
    rows = sample["index"] % 8
    torch.testing.assert_close(to_tensor(sample["obs"]), torch.as_tensor(planes[rows], dtype=torch.float32))
    torch.testing.assert_close(to_tensor(sample["next_obs"]), torch.as_tensor(~planes[rows], dtype=torch.float32))


def test_rollout_store_keeps_the_stored_dtype_of_its_observations():
    for given, stored in ((np.uint8, np.uint8), (np.float64, np.float32)):
        store = RolloutStore(2, 3, (4,), (), np.dtype(np.int64), obs_dtype=given)
        store.add(0, np.full((3, 4), 200, given), np.zeros(3, np.int64), *np.zeros((3, 3), np.float32),
                  np.zeros(3, bool), np.zeros(3, bool))
        assert store.data["obs"].dtype == stored and store.data["obs"][0].max() == 200
