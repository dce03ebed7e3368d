"""Offline datasets: what loads (npz, a replay snapshot), what is refused with one clear DatasetError, and writing."""

import re
import sys

import gymnasium as gym
import numpy as np
import pytest

from relayrl.data.datasets import load_dataset, save_dataset
from relayrl.data.replay import SHARD_FILE, ReplayBuffer
from relayrl.errors import DatasetError, install_hint

PENDULUM = (gym.spaces.Box(-8.0, 8.0, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (1,), np.float32))
CARTPOLE = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


def transitions(n=10, obs_dim=3, act=(1,), rng=np.random.default_rng(0), discrete=None):
    action = rng.integers(0, discrete, n) if discrete else rng.uniform(-2, 2, (n, *act)).astype(np.float32)
    return {"obs": rng.normal(size=(n, obs_dim)), "action": action, "reward": rng.normal(size=n),
            "next_obs": rng.normal(size=(n, obs_dim)), "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool)}


def test_an_npz_loads_as_replay_stores_it_with_box_actions_scaled_to_unit_range(tmp_path):
    data = transitions()
    data["action"][:2] = [[-2.0], [2.0]]
    np.savez(tmp_path / "d.npz", **data)
    out = load_dataset(tmp_path / "d.npz", *PENDULUM)
    assert out["obs"].dtype == np.float32 and out["obs"].shape == (10, 3)
    np.testing.assert_allclose(out["action"][:, 0], data["action"][:, 0] / 2, rtol=1e-6)
    assert out["action"][0, 0] == -1.0 and out["action"][1, 0] == 1.0
    assert out["reward"].dtype == np.float32 and set(out) == {"obs", "action", "reward", "next_obs", "terminated",
                                                               "truncated"}


def test_discrete_actions_become_indices_from_the_spaces_start(tmp_path):
    data = transitions(obs_dim=4, discrete=3)
    data["action"] = data["action"] + 5
    np.savez(tmp_path / "d.npz", **data)
    out = load_dataset(tmp_path / "d.npz", CARTPOLE[0], gym.spaces.Discrete(3, start=5))
    np.testing.assert_array_equal(out["action"], data["action"] - 5)
    assert out["action"].dtype == np.int64


def test_truncated_is_optional(tmp_path):
    data = transitions()
    del data["truncated"]
    np.savez(tmp_path / "d.npz", **data)
    assert not load_dataset(tmp_path / "d.npz", *PENDULUM)["truncated"].any()


def test_a_replay_snapshot_of_a_run_loads_from_the_run_directory(tmp_path):
    buffer = ReplayBuffer(8)
    data = transitions(n=12)
    replay = {"obs": data["obs"].astype(np.float32), "action": data["action"] / 2, "reward": data["reward"],
              "next_obs": data["next_obs"].astype(np.float32), "terminated": data["terminated"],
              "discount": np.full(12, 0.99, np.float32)}
    buffer.add(replay)  # a ring of 8: the oldest 4 are overwritten
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    buffer.save(tmp_path / "run" / "checkpoints" / "replay.safetensors")
    out = load_dataset(tmp_path / "run", *PENDULUM)
    np.testing.assert_allclose(out["obs"], replay["obs"][4:])
    np.testing.assert_allclose(out["action"], replay["action"][4:])  # already the learner's [-1, 1]


def test_the_replay_shards_of_a_run_load_together(tmp_path):
    """A run with replay shards saves one snapshot per shard (runtime/service.py): the dataset is all of them."""
    data = transitions(n=10)
    replay = {"obs": data["obs"].astype(np.float32), "action": data["action"] / 2, "reward": data["reward"],
              "next_obs": data["next_obs"].astype(np.float32), "terminated": data["terminated"],
              "discount": np.full(10, 0.99, np.float32)}
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    for k, rows in enumerate((slice(0, 6), slice(6, 10))):
        shard = ReplayBuffer(16)
        shard.add({key: value[rows] for key, value in replay.items()})
        shard.save(tmp_path / "run" / "checkpoints" / SHARD_FILE.format(k=k))
    out = load_dataset(tmp_path / "run", *PENDULUM)
    np.testing.assert_allclose(out["obs"], replay["obs"])  # shard 0's rows, then shard 1's
    np.testing.assert_allclose(out["reward"], replay["reward"].astype(np.float32))


def test_a_replay_of_n_step_transitions_is_refused(tmp_path):
    buffer = ReplayBuffer(8)
    data = transitions(n=4)
    buffer.add({"obs": data["obs"].astype(np.float32), "action": data["action"] / 2, "reward": data["reward"],
                "next_obs": data["next_obs"].astype(np.float32), "terminated": data["terminated"],
                "discount": np.array([0.97, 0.97, 0.98, 0.99], np.float32)})
    buffer.save(tmp_path / "replay.safetensors")
    with pytest.raises(DatasetError, match="n-step transitions"):
        load_dataset(tmp_path / "replay.safetensors", *PENDULUM)


def bad(tmp_path, **changes):
    data = transitions()
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    np.savez(tmp_path / "d.npz", **data)
    return tmp_path / "d.npz"


@pytest.mark.parametrize("changes, message", [
    ({"reward": None, "terminated": None}, r"lacks the column\(s\) reward, terminated"),
    ({"obs": np.zeros((10, 4))}, r"obs has shape \(10, 4\), expected \(10, 3\)"),   # another env's observations
    ({"action": np.zeros((10, 2), np.float32)}, r"action has shape \(10, 2\), expected \(10, 1\)"),
    ({"action": np.zeros((10, 1), np.int64)}, "action has dtype int64, the env takes float actions"),
    ({"obs": np.zeros((10, 3), np.uint8)}, "obs has dtype uint8, the env observes float32"),
    ({"reward": np.zeros(9)}, r"reward has shape \(9,\), expected \(10,\)"),
    ({"action": np.full((10, 1), 3.0, np.float32)}, "actions outside the bounds"),
    ({"terminated": np.full(10, 0.5)}, "terminated must be booleans"),
    ({"reward": np.full(10, np.nan)}, "reward must be finite"),
])
def test_bad_arrays_are_refused_naming_the_column(tmp_path, changes, message):
    with pytest.raises(DatasetError, match=message):
        load_dataset(bad(tmp_path, **changes), *PENDULUM)


def test_a_dataset_of_another_env_is_refused(tmp_path):
    np.savez(tmp_path / "cartpole.npz", **transitions(obs_dim=4, discrete=2))
    with pytest.raises(DatasetError, match="obs has shape"):
        load_dataset(tmp_path / "cartpole.npz", *PENDULUM)
    np.savez(tmp_path / "pendulum.npz", **transitions())
    with pytest.raises(DatasetError, match="a dataset of another env"):
        load_dataset(tmp_path / "pendulum.npz", gym.spaces.Box(-8.0, 8.0, (3,), np.float32), gym.spaces.Discrete(3))


def test_missing_corrupt_pickled_and_unknown_files_are_refused(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(tmp_path / "none.npz", *PENDULUM)
    np.savez(tmp_path / "d.npz", **transitions())
    (tmp_path / "cut.npz").write_bytes((tmp_path / "d.npz").read_bytes()[:300])  # a truncated copy
    with pytest.raises(DatasetError, match="damaged"):
        load_dataset(tmp_path / "cut.npz", *PENDULUM)
    np.savez(tmp_path / "evil.npz", obs=np.array([object()], dtype=object))
    with pytest.raises(DatasetError, match="never unpickles"):
        load_dataset(tmp_path / "evil.npz", *PENDULUM)
    (tmp_path / "x.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(DatasetError, match="damaged or not a safetensors"):
        load_dataset(tmp_path / "x.safetensors", *PENDULUM)
    (tmp_path / "d.csv").write_text("1,2")
    with pytest.raises(DatasetError, match="not .csv"):
        load_dataset(tmp_path / "d.csv", *PENDULUM)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no replay snapshot"):
        load_dataset(tmp_path / "empty", *PENDULUM)


def test_a_minari_folder_without_minari_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "minari", None)  # (as on a machine without it: the import fails)
    (tmp_path / "ds" / "data").mkdir(parents=True)
    (tmp_path / "ds" / "data" / "main_data.hdf5").write_bytes(b"")
    with pytest.raises(DatasetError, match=re.escape(install_hint("offline"))):
        load_dataset(tmp_path / "ds", *PENDULUM)


def write_minari(root, env_id, episodes=3, steps=20):
    """A real Minari dataset (HDF5) of random episodes in ``root``, written by minari itself; the episodes."""
    minari = pytest.importorskip("minari")
    from minari.data_collector.episode_buffer import EpisodeBuffer

    env = gym.make(env_id, max_episode_steps=steps)
    buffers = []
    for k in range(episodes):
        obs, _ = env.reset(seed=k)
        env.action_space.seed(k)
        columns = {"observations": [obs], "actions": [], "rewards": [], "terminations": [], "truncations": []}
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(columns, (obs, action, reward, terminated, truncated)):
                columns[key].append(value)
            done = terminated or truncated
        buffers.append(EpisodeBuffer(id=k, infos={}, **{key: np.array(v) for key, v in columns.items()}))
    minari.create_dataset_from_buffers(f"test/{env_id.lower()}-v0", buffers, env=env, algorithm_name="random",
                                       data_format="hdf5")
    return root / "test" / f"{env_id.lower()}-v0", buffers


def test_a_minari_dataset_loads_as_transitions_with_box_actions_scaled(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    folder, episodes = write_minari(tmp_path, "Pendulum-v1")
    data = load_dataset(folder, *PENDULUM)
    obs = np.concatenate([e.observations[:-1] for e in episodes])
    next_obs = np.concatenate([e.observations[1:] for e in episodes])
    np.testing.assert_allclose(data["obs"], obs, rtol=1e-6)
    np.testing.assert_allclose(data["next_obs"], next_obs, rtol=1e-6)  # episode ends do not run into the next
    np.testing.assert_allclose(data["action"], np.concatenate([e.actions for e in episodes]) / 2.0, rtol=1e-6)
    assert data["truncated"].sum() == len(episodes) and data["terminated"].sum() == 0
    assert data["reward"].dtype == np.float32 and len(data["reward"]) == len(obs)


def test_a_minari_dataset_of_another_env_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    folder, _ = write_minari(tmp_path, "CartPole-v1")
    with pytest.raises(DatasetError, match=r"obs has shape \(\d+, 4\), expected \(\d+, 3\).*another env"):
        load_dataset(folder, *PENDULUM)


def test_save_dataset_never_overwrites_and_round_trips(tmp_path):
    data = transitions()
    path = save_dataset(tmp_path / "d.npz", data)
    before = path.read_bytes()
    with pytest.raises(DatasetError, match="exists already"):
        save_dataset(path, transitions(n=3))
    assert path.read_bytes() == before
    with pytest.raises(DatasetError, match="FILE.npz"):
        save_dataset(tmp_path / "d.bin", data)
    np.testing.assert_allclose(load_dataset(path, *PENDULUM)["reward"], data["reward"].astype(np.float32))
