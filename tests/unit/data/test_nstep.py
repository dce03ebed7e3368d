import numpy as np
import pytest

from relayrl.data.nstep import NStepAccumulator


def push(acc, t, r, term=False, trunc=False):
    return acc.push(np.array([[t]], np.float32), np.array([t]), np.array([r], np.float32),
                    np.array([[t + 1]], np.float32), np.array([term]), np.array([trunc]))


@pytest.mark.parametrize("term, trunc", [(True, False), (False, True)])
def test_three_step_returns_hand_computed(term, trunc):
    acc = NStepAccumulator(3, 0.5, 1)
    assert push(acc, 0, 1.0) == {} and push(acc, 1, 2.0) == {}
    out = push(acc, 2, 3.0)
    assert out["reward"][0] == pytest.approx(1 + 0.5 * 2 + 0.25 * 3)
    assert out["next_obs"][0, 0] == 3 and out["discount"][0] == pytest.approx(0.125) and not out["terminated"][0]
    out = push(acc, 3, 4.0, term=term, trunc=trunc)  # the episode ends: flush with shorter horizons
    np.testing.assert_allclose(out["reward"], [2 + 0.5 * 3 + 0.25 * 4, 3 + 0.5 * 4, 4])
    np.testing.assert_allclose(out["discount"], [0.125, 0.25, 0.5])
    np.testing.assert_array_equal(out["obs"][:, 0], [1, 2, 3])
    np.testing.assert_array_equal(out["next_obs"][:, 0], [4, 4, 4])  # the final observation
    assert list(out["terminated"]) == [term] * 3  # truncation still bootstraps
    assert push(acc, 0, 1.0) == {}  # the next episode starts from scratch


def test_envs_are_independent():
    acc = NStepAccumulator(2, 1.0, 2)
    obs = np.zeros((2, 1), np.float32)
    out = acc.push(obs, np.zeros(2), np.array([1.0, 5.0]), obs, np.array([False, True]), np.array([False, False]))
    assert list(out["reward"]) == [5.0] and list(out["terminated"]) == [True]
    out = acc.push(obs, np.zeros(2), np.array([2.0, 7.0]), obs, np.array([False, False]), np.array([False, False]))
    assert list(out["reward"]) == [3.0]


@pytest.mark.parametrize("n", [0, None, 2.0])
def test_a_bad_n_is_refused_with_the_fix(n):
    with pytest.raises(ValueError, match="integer n >= 1") as info:
        NStepAccumulator(n, 0.99, 2)
    assert ("n_step_for" in str(info.value)) == (n is None)
