import numpy as np
import pytest

from relayrl.policy.normalizer import RunningMeanStd


def test_batched_updates_match_numpy_over_all_data():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4))
    rms = RunningMeanStd((4,))
    for chunk in np.array_split(data, [1, 7, 300, 301, 650]):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-10)
    assert rms.count == 1000


def test_update_does_not_alias_previous_mean():
    rms = RunningMeanStd((2,))
    rms.update(np.ones((5, 2)))
    before = rms.mean
    snapshot = before.copy()
    rms.update(np.full((5, 2), 3.0))
    np.testing.assert_array_equal(before, snapshot)  # roadrunner's in-place aliasing bug
    np.testing.assert_allclose(rms.mean, [2.0, 2.0])
    np.testing.assert_allclose(rms.var, [1.0, 1.0])  # (x-old)(x-new), not (x-old)^2


def test_normalize_clips_and_returns_float32():
    rms = RunningMeanStd((1,), clip=5.0)
    rms.update(np.array([[0.0], [2.0]]))
    out = rms.normalize(np.array([[1.0], [1000.0]]))
    assert out.dtype == np.float32
    assert out[0, 0] == pytest.approx(0.0, abs=1e-6) and out[1, 0] == 5.0


def test_state_round_trip_and_shape_check():
    rms = RunningMeanStd((3,))
    rms.update(np.random.default_rng(1).normal(size=(10, 3)))
    other = RunningMeanStd((3,))
    other.load_state_dict(rms.state_dict())
    np.testing.assert_array_equal(other.mean, rms.mean)
    assert other.count == rms.count
    with pytest.raises(ValueError, match="shape"):
        RunningMeanStd((2,)).load_state_dict(rms.state_dict())


def test_merging_workers_moments_equals_the_statistics_of_the_pooled_data():
    rng = np.random.default_rng(0)
    parts = [rng.normal(loc, scale, (n, 3)) for loc, scale, n in ((0.0, 1.0, 50), (5.0, 0.1, 7), (-2.0, 3.0, 200))]
    learner = RunningMeanStd((3,))
    learner.update(parts[0])  # what the learner already had
    for part in parts[1:]:  # each worker counts its own observations and reports their moments
        seen = RunningMeanStd((3,))
        seen.update(part[:4])
        seen.update(part[4:])
        learner.merge_state(seen.state_dict())
    pooled = np.concatenate(parts)
    np.testing.assert_allclose(learner.mean, pooled.mean(0), rtol=1e-12)
    np.testing.assert_allclose(learner.var, pooled.var(0), rtol=1e-12)
    assert learner.count == len(pooled)
