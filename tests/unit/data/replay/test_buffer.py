import numpy as np
import pytest

from relayrl.data.replay import ReplayBuffer
from relayrl.errors import CheckpointError, ConfigError


def transitions(n, start=0, obs_dim=3, version=None):
    batch = {"obs": np.arange(start, start + n, dtype=np.float32)[:, None].repeat(obs_dim, 1),
             "action": np.arange(start, start + n) % 2, "reward": np.ones(n, np.float32)}
    if version is not None:
        batch["version"] = np.full(n, version, np.int64)
    return batch


def test_ring_wraps_and_keeps_the_newest_rows():
    buf = ReplayBuffer(5, seed=0)
    buf.add(transitions(3))
    buf.add(transitions(4, start=3))  # 7 items into 5 rows: 0 and 1 are gone
    assert len(buf) == 5
    stored = sorted(buf.storage.arrays["obs"][:, 0])
    assert stored == [2, 3, 4, 5, 6]
    buf.add(transitions(12, start=100))  # more than capacity at once: the newest 5
    assert sorted(buf.storage.arrays["obs"][:, 0]) == [107, 108, 109, 110, 111]


def test_samples_are_copies_with_index_and_weight():
    buf = ReplayBuffer(10, seed=0)
    buf.add(transitions(10))
    s = buf.sample(4)
    assert set(s) == {"obs", "action", "reward", "index", "weight"} and s["obs"].shape == (4, 3)
    s["obs"][:] = -1
    assert (buf.storage.arrays["obs"] >= 0).all()  # never aliases storage
    np.testing.assert_array_equal(s["weight"], 1.0)


def test_prioritized_frequencies_follow_priorities():
    buf = ReplayBuffer(4, sampler="prioritized", alpha=1.0, eps=0.0, seed=0)
    index = buf.add(transitions(4))
    buf.update_priorities(index, np.array([1.0, 2.0, 3.0, 4.0]))
    counts = np.zeros(4)
    for _ in range(500):
        s = buf.sample(32)
        np.add.at(counts, (s["index"] % 4), 1)
    freq = counts / counts.sum()
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.02)


def test_importance_weights_are_normalised_and_beta_anneals():
    buf = ReplayBuffer(4, sampler="prioritized", alpha=1.0, beta=0.5, beta_steps=10, eps=0.0, seed=0)
    index = buf.add(transitions(4))
    buf.update_priorities(index, np.array([1.0, 2.0, 3.0, 4.0]))
    s = buf.sample(64)
    rows = s["index"] % 4
    p = np.array([0.1, 0.2, 0.3, 0.4])
    expected = (4 * p[rows]) ** -0.5 / (4 * 0.1) ** -0.5
    np.testing.assert_allclose(s["weight"], expected, rtol=1e-5)
    assert s["weight"].max() <= 1.0
    for _ in range(20):
        buf.sample(8)
    assert buf.sampler.beta == 1.0


def test_priority_update_for_an_overwritten_item_is_ignored():
    buf = ReplayBuffer(2, sampler="prioritized", alpha=1.0, eps=0.0, seed=0)
    old = buf.add(transitions(2))
    new = buf.add(transitions(1, start=10))  # overwrites row 0
    assert buf.update_priorities(old, np.array([100.0, 5.0])) == 1  # only row 1 still holds its item
    assert buf.sampler.sum[0] == 1.0 and buf.sampler.sum[1] == 5.0
    assert buf.update_priorities(new, np.array([7.0])) == 1 and buf.sampler.sum[0] == 7.0


def test_bad_priority_updates_are_refused_and_change_nothing():
    buf = ReplayBuffer(8, sampler="prioritized", alpha=1.0, eps=0.0, seed=0)
    index = buf.add(transitions(8))
    tree = buf.sampler.sum
    before = tree.tree.copy(), tree.cum.copy(), tree.mins.copy()
    with pytest.raises(ValueError, match="finite"):
        buf.update_priorities(index, np.array([1.0, 2.0, np.nan, 1.0, 1.0, 1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="8 items but 3 priorities"):
        buf.update_priorities(index, np.ones(3))
    with pytest.raises(ValueError, match="never negative"):
        buf.update_priorities(-index - 1, np.ones(8))
    for now, then in zip((tree.tree, tree.cum, tree.mins), before):
        np.testing.assert_array_equal(now, then)


def test_a_priority_update_for_an_evicted_item_is_ignored():
    buf = ReplayBuffer(4, sampler="prioritized", max_use=1, alpha=1.0, eps=0.0, seed=0)
    buf.add(transitions(4))
    s = buf.sample(2)  # both sampled once: evicted
    assert buf.update_priorities(s["index"], np.array([9.0, 9.0])) == 0
    assert np.all(buf.sampler.sum[s["index"] % 4] == 0.0)


def test_uniform_rows_cover_the_filled_rows_evenly():
    buf = ReplayBuffer(1000, seed=0)
    buf.add(transitions(10))  # only 10 of 1000 rows are filled
    rows = np.concatenate([buf.sample(256)["index"] % 1000 for _ in range(200)])
    counts = np.bincount(rows, minlength=10)
    assert rows.max() < 10 and len(counts) == 10
    assert np.all(np.abs(counts / len(rows) - 0.1) < 0.01)  # 51,200 draws: sd of a share ~0.0013


def test_max_use_evicts_items_sampled_that_often():
    buf = ReplayBuffer(4, max_use=2, seed=0)
    buf.add(transitions(4))
    seen = np.zeros(4, int)
    while True:
        s = buf.sample(1)
        if s is None:
            break
        seen[int(s["index"][0] % 4)] += 1
    np.testing.assert_array_equal(seen, [2, 2, 2, 2])
    assert buf.evicted == 4 and len(buf) == 0
    buf.add(transitions(1, start=9))  # a new item is sampleable again
    assert buf.sample(1)["obs"][0, 0] == 9


def test_max_staleness_evicts_old_versions():
    buf = ReplayBuffer(10, max_staleness=2, seed=0)
    buf.add(transitions(3, version=0))
    buf.add(transitions(3, start=3, version=1))
    s = buf.sample(50, version=2)  # version 0 is 2 behind: evicted
    assert set(s["obs"][:, 0]) == {3, 4, 5} and len(buf) == 3
    assert buf.sample(5, version=3) is None  # everything is stale now
    with pytest.raises(ValueError, match="version"):
        buf.sample(5)
    with pytest.raises(ValueError, match="'version' column"):
        buf.add(transitions(2))


def test_save_load_round_trip_continues_identically(tmp_path):
    buf = ReplayBuffer(8, sampler="prioritized", seed=3)
    index = buf.add(transitions(6))
    buf.update_priorities(index, np.arange(6.0))
    buf.sample(4)
    path = buf.save(tmp_path / "replay")
    other = ReplayBuffer(8, sampler="prioritized", seed=99)
    other.load(path)
    a, b = buf.sample(16), other.sample(16)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert buf.stats()["replay/size"] == other.stats()["replay/size"] == 6


def test_corrupt_or_mismatched_buffer_files_give_clear_errors(tmp_path):
    buf = ReplayBuffer(8, seed=0)
    buf.add(transitions(4))
    path = buf.save(tmp_path / "replay")
    with pytest.raises(CheckpointError, match="capacity"):
        ReplayBuffer(16).load(path)
    other = ReplayBuffer(8)
    other.add({"x": np.zeros((2, 5))})
    with pytest.raises(CheckpointError, match="schema"):
        other.load(path)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 40)
    with pytest.raises(CheckpointError, match="unreadable"):
        ReplayBuffer(8).load(bad)


def test_offline_dataset_preload_without_pickle(tmp_path):
    data = transitions(5)
    np.savez(tmp_path / "data.npz", **data)
    buf = ReplayBuffer(10, seed=0)
    assert buf.load_dataset(tmp_path / "data.npz") == 5 and len(buf) == 5
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "evil.npz", obs=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="cannot be loaded"):
        ReplayBuffer(10).load_dataset(tmp_path / "evil.npz")


def test_sampler_option_errors():
    with pytest.raises(ConfigError, match="prioritized"):
        ReplayBuffer(4, alpha=0.5)
    with pytest.raises(ConfigError, match="unknown replay sampler"):
        ReplayBuffer(4, sampler="lifo")


def test_memory_is_the_arrays_plus_a_constant():
    buf = ReplayBuffer(1_000_000, seed=0)
    chunk = {"obs": np.zeros((1000, 17), np.float32), "action": np.zeros((1000, 6), np.float32),
             "reward": np.zeros(1000, np.float32), "next_obs": np.zeros((1000, 17), np.float32),
             "terminated": np.zeros(1000, bool)}
    buf.add(chunk)
    fields = 17 * 4 * 2 + 6 * 4 + 4 + 1
    assert sum(a.nbytes for a in buf.storage.arrays.values()) == 1_000_000 * fields
    # one record per row; the only padding rounds a record up to its widest item (4 bytes here)
    assert buf.storage.data.nbytes == 1_000_000 * (fields + 3)
    overhead = buf.storage.generation.nbytes
    assert overhead == 8_000_000  # one int64 per row, nothing per transition in Python


def test_mixed_fields_round_trip_through_the_record_layout():
    rng = np.random.default_rng(3)
    n = 50
    batch = {"flag": rng.random(n) > 0.5, "image": rng.integers(0, 255, (n, 3, 4, 2), dtype=np.uint8),
             "step": rng.integers(-10**12, 10**12, n), "obs": rng.random((n, 5), dtype=np.float32),
             "q": rng.random((n, 2, 3))}
    buf = ReplayBuffer(64, seed=0)
    buf.add(batch)
    rows = np.array([[4, 0, 49], [7, 7, 1]])
    got = buf.storage.get(rows)
    for key, value in batch.items():
        assert got[key].dtype == value.dtype and got[key].flags.c_contiguous
        np.testing.assert_array_equal(got[key], value[rows])
    for key, value in batch.items():
        np.testing.assert_array_equal(buf.storage.arrays[key][:n], value)
    picked = np.array([49, 0, 7, 7, 23])
    gathered, ids = buf.storage.gather(picked)  # what samples use: views into one block of records
    np.testing.assert_array_equal(ids, 64 + picked)  # generation 1 of each row
    for key, value in batch.items():
        assert gathered[key].dtype == value.dtype and gathered[key].shape == (5, *value.shape[1:])
        np.testing.assert_array_equal(gathered[key], value[picked])


def test_a_sample_owns_its_block_and_reaches_the_learner_without_a_copy_per_field():
    from relayrl.data.dtypes import to_tensor

    buf = ReplayBuffer(16, seed=0)
    buf.add(transitions(16))
    s = buf.sample(8)
    kept = {k: v.copy() for k, v in s.items()}
    assert s["obs"].base is s["reward"].base is not None  # one gathered block, fields are views into it
    assert not np.shares_memory(s["obs"], buf.storage.data)
    assert np.shares_memory(to_tensor(s["obs"]).numpy(), s["obs"])  # float32 field -> tensor, no copy
    np.testing.assert_array_equal(s["obs"][:, 0], s["index"] % 16)  # each row is its own item's record
    for _ in range(3):
        buf.sample(8)
    buf.add(transitions(16, start=100))  # every row overwritten
    for key, value in kept.items():
        np.testing.assert_array_equal(s[key], value)


def test_a_replay_file_written_before_the_running_sums_loads_and_samples(tmp_path):
    """The saved state is the same as before this layout (fields, generations, leaf priorities): a file
    written then (its state built here key by key) loads, and the trees are rebuilt from its leaves."""
    from relayrl.io.checkpoint import save_checkpoint

    obs = np.arange(6, dtype=np.float32)[:, None].repeat(3, 1)
    priorities = np.array([0.0, 2.0, 1.0, 4.0, 0.5, 3.0, 0.0, 0.0])  # row 0: evicted, rows 6-7: never written
    state = {"storage": {"arrays": {"obs": obs, "action": np.arange(6) % 2, "reward": np.ones(6, np.float32)},
                         "generation": np.array([1, 1, 1, 1, 1, 1, 0, 0]), "capacity": 8, "pos": 6, "size": 6},
             "sampler": {"priorities": priorities, "max_priority": 4.0, "calls": 3, "live": 5},
             "rng": np.random.default_rng(5).bit_generator.state, "evicted": 1}
    path = save_checkpoint(tmp_path / "old", state, {"kind": "replay_buffer", "capacity": 8, "layout": "plain"})
    buf = ReplayBuffer(8, sampler="prioritized", alpha=1.0, seed=0)
    buf.load(path)
    tree = buf.sampler.sum
    assert tree.root == priorities.sum() and tree.min_positive == 0.5
    beta = buf.sampler.beta  # annealed from the saved count of sample calls
    s = buf.sample(64)
    rows = s["index"] % 8
    assert set(rows.tolist()) <= {1, 2, 3, 4, 5}
    np.testing.assert_array_equal(s["obs"][:, 0], rows)
    np.testing.assert_allclose(s["weight"], (priorities[rows] / 0.5) ** -beta, rtol=1e-6)


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
def test_building_a_buffer_loads_the_kernels_its_samples_run(sampler):
    """Numba loads (or compiles) a kernel at its first call: a buffer does that when it is built, so the
    first sample inside a run's timed training does not (a fresh process, so no other test did it)."""
    import subprocess
    import sys

    code = ("from relayrl.data.replay import ReplayBuffer; from relayrl.data.replay.storage import _gather; "
            "from relayrl.data.replay import sumtree; "
            "kernels = [_gather] + [v for v in vars(sumtree).values() if hasattr(v, 'signatures')]; "
            f"before = sum(len(k.signatures) for k in kernels); ReplayBuffer(8, sampler={sampler!r}); "
            "print(before, len(_gather.signatures), sum(len(k.signatures) for k in kernels))")
    before, gather, after = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                    check=True).stdout.split())
    assert before == 0 and gather == 1 and after > (1 if sampler == "prioritized" else 0)
