import numpy as np
import pytest

from relayrl.data.gae import compute_gae
from relayrl.data.rollout import RolloutStore


def test_gae_hand_computed_with_termination_and_truncation():
    # one env, 4 steps: terminated at t=1, truncated at t=3 with V(final obs) = 2.0
    rewards = np.ones((4, 1), np.float32)
    values = np.array([[0.5], [0.6], [0.7], [0.8]], np.float32)
    next_values = np.array([[0.6], [99.0], [0.8], [2.0]], np.float32)  # 99: ignored (terminal)
    terminated = np.array([[False], [True], [False], [False]])
    truncated = np.array([[False], [False], [False], [True]])
    adv, ret = compute_gae(rewards, values, next_values, terminated, truncated, gamma=0.9, lam=0.8)
    # deltas: 1+.9*.6-.5=1.04, 1-.6=.4, 1+.9*.8-.7=1.02, 1+.9*2-.8=2.0
    expected = np.array([1.04 + 0.72 * 0.4, 0.4, 1.02 + 0.72 * 2.0, 2.0])
    np.testing.assert_allclose(adv[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], expected + values[:, 0], rtol=1e-6)


def test_gae_lambda_one_is_discounted_return_minus_value():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(6, 3)).astype(np.float32)
    values = rng.normal(size=(6, 3)).astype(np.float32)
    last = rng.normal(size=3).astype(np.float32)
    next_values = np.concatenate([values[1:], last[None]])
    zeros = np.zeros((6, 3), bool)
    adv, _ = compute_gae(rewards, values, next_values, zeros, zeros, gamma=0.95, lam=1.0)
    g = last.astype(np.float64)
    for t in range(5, -1, -1):
        g = rewards[t] + 0.95 * g
        np.testing.assert_allclose(adv[t], g - values[t], rtol=1e-5, atol=1e-5)


def test_rollout_store_fills_next_value_and_keeps_bootstraps():
    store = RolloutStore(3, 2, (1,), (), np.dtype(np.int64))
    for t in range(3):
        store.add(t, np.zeros((2, 1)), np.zeros(2), np.zeros(2), np.array([t, 10 + t]), np.ones(2),
                  np.zeros(2, bool), np.array([False, t == 1]))
    store.bootstrap(1, np.array([False, True]), np.array([42.0]))
    batch = store.finish(np.array([100.0, 200.0]))
    np.testing.assert_array_equal(batch["next_value"][:, 0], [1, 2, 100])
    np.testing.assert_array_equal(batch["next_value"][:, 1], [11, 42, 200])
    # the next rollout starts clean: an old bootstrap must not leak into it
    for t in range(3):
        store.add(t, np.zeros((2, 1)), np.zeros(2), np.zeros(2), np.array([t, t]), np.ones(2),
                  np.zeros(2, bool), np.zeros(2, bool))
    assert store.finish(np.array([5.0, 5.0]))["next_value"][1, 1] == pytest.approx(2.0)
