"""relayrl.training.collector: on-policy rollouts on a real CartPole SyncVectorEnv."""

from __future__ import annotations

import numpy as np
import pytest

from relayrl.envs import make, make_vec
from relayrl.envs.vector import SyncVectorEnv
from relayrl.core import Policy
from relayrl.training.collector import OnPolicyCollector
from relayrl.types import PolicyOutput

BOOTSTRAP = 7.0
LOGP = -0.69


class FakePolicy(Policy):
    """Alternating pushes (CartPole stays up for > 5 steps); act's value encodes (call, env)."""

    action_shape = ()
    action_dtype = np.int64
    obs_dtype = np.dtype(np.float32)

    def __init__(self):
        self.update_norm = False
        self.calls = 0
        self.act_obs = []
        self.value_obs = []
        self.update_norm_seen = []

    def act(self, obs, mode):
        assert mode == "collect"
        self.update_norm_seen.append(self.update_norm)
        n = len(obs)
        self.act_obs.append(obs.copy())
        action = (np.arange(n) + self.calls) % 2
        value = 100.0 * self.calls + np.arange(n)  # never equal to BOOTSTRAP
        self.calls += 1
        return PolicyOutput(action=action.astype(np.int64), env_action=action.astype(np.int64),
                            logp=np.full(n, LOGP, np.float32), value=value.astype(np.float32), obs=obs.copy())

    def value(self, obs, rows=None):
        self.value_obs.append(obs.copy())
        return np.full(len(obs), BOOTSTRAP, np.float32)

    def get_weights(self):
        return {}

    def set_weights(self, weights, version=None):
        pass


def make_collector(num_envs=2, num_steps=12, horizon=5, seed=3):
    venv = make_vec("CartPole-v1", num_envs=num_envs, seed=seed, max_episode_steps=horizon)
    policy = FakePolicy()
    collector = OnPolicyCollector(venv, policy, num_steps)
    collector.reset(seed=seed)
    return venv, policy, collector


def test_rollout_arrays_are_time_by_env():
    venv, policy, collector = make_collector(num_envs=3, num_steps=12)
    with venv:
        batch = collector.collect()
    T, N = 12, 3
    assert batch["obs"].shape == (T, N, 4) and batch["obs"].dtype == np.float32
    assert batch["action"].shape == (T, N) and batch["action"].dtype == np.int64
    for key in ("logp", "value", "reward", "next_value"):
        assert batch[key].shape == (T, N) and batch[key].dtype == np.float32, key
    for key in ("terminated", "truncated"):
        assert batch[key].shape == (T, N) and batch[key].dtype == np.bool_, key
    np.testing.assert_array_equal(batch["logp"], np.full((T, N), LOGP, np.float32))
    np.testing.assert_array_equal(batch["reward"], np.ones((T, N), np.float32))
    np.testing.assert_array_equal(batch["obs"], np.stack(policy.act_obs))
    for t in range(T):
        np.testing.assert_array_equal(batch["action"][t], (np.arange(N) + t) % 2)
        np.testing.assert_array_equal(batch["value"][t], 100.0 * t + np.arange(N))


def test_next_value_bootstraps_truncations_and_follows_otherwise():
    T, N, horizon = 12, 2, 5
    venv, policy, collector = make_collector(num_envs=N, num_steps=T, horizon=horizon)
    with venv:
        batch = collector.collect()
    truncated_steps = [t for t in range(T) if (t + 1) % horizon == 0]  # 4 and 9
    assert not batch["terminated"].any()
    np.testing.assert_array_equal(np.flatnonzero(batch["truncated"][:, 0]), truncated_steps)
    np.testing.assert_array_equal(batch["truncated"][:, 0], batch["truncated"][:, 1])
    for t in range(T):
        if t in truncated_steps:
            np.testing.assert_array_equal(batch["next_value"][t], np.full(N, BOOTSTRAP))
        elif t < T - 1:
            np.testing.assert_array_equal(batch["next_value"][t], batch["value"][t + 1])
            assert not np.any(batch["next_value"][t] == BOOTSTRAP)
        else:  # last step: value() of the observation after the rollout
            np.testing.assert_array_equal(batch["next_value"][t], np.full(N, BOOTSTRAP))
    # value() saw the final observations at each truncation (N rows), then the last obs
    assert [len(v) for v in policy.value_obs] == [N, N, N]


def test_bootstrap_uses_final_observation_of_truncated_episode():
    T, N, horizon, seed = 6, 2, 5, 3
    venv, policy, collector = make_collector(num_envs=N, num_steps=T, horizon=horizon, seed=seed)
    with venv:
        collector.collect()
    # replay env k by hand with the same seed and actions: its 5th observation is the final one
    for k in range(N):
        env = make("CartPole-v1", max_episode_steps=horizon)
        env.reset(seed=seed + k)
        for t in range(horizon):
            obs, _, terminated, truncated, _ = env.step(int((k + t) % 2))
        env.close()
        assert truncated and not terminated
        np.testing.assert_array_equal(policy.value_obs[0][k], obs)
        # and it is not the first observation of the next episode, which the policy acts on next
        assert not np.array_equal(policy.act_obs[horizon][k], obs)
    # the last value() call is on the observations after the rollout
    assert len(policy.value_obs) == 2
    assert not np.array_equal(policy.value_obs[-1], policy.act_obs[-1])


def test_only_truncated_envs_are_bootstrapped():
    T = 10
    venv = SyncVectorEnv([lambda: make("CartPole-v1", max_episode_steps=5),
                          lambda: make("CartPole-v1", max_episode_steps=3)])
    policy = FakePolicy()
    collector = OnPolicyCollector(venv, policy, T)
    collector.reset(seed=0)
    with venv:
        batch = collector.collect()
    np.testing.assert_array_equal(np.flatnonzero(batch["truncated"][:, 0]), [4, 9])
    np.testing.assert_array_equal(np.flatnonzero(batch["truncated"][:, 1]), [2, 5, 8])
    for t in range(T - 1):
        for k in range(2):
            expected = BOOTSTRAP if batch["truncated"][t, k] else batch["value"][t + 1, k]
            assert batch["next_value"][t, k] == expected, (t, k)
    # one value() call per step with a truncation, with only the truncated rows, plus the last obs
    assert [len(v) for v in policy.value_obs] == [1, 1, 1, 1, 1, 2]  # t = 2, 4, 5, 8, 9, then last
    assert collector.episodes.lengths == [3, 5, 3, 3, 5]


def test_finished_episodes_are_tracked_across_rollouts():
    T, N, horizon = 12, 2, 5
    venv, policy, collector = make_collector(num_envs=N, num_steps=T, horizon=horizon)
    with venv:
        collector.collect()
        assert collector.episodes.lengths == [5, 5, 5, 5]
        assert collector.episodes.returns == [5.0, 5.0, 5.0, 5.0]
        returns, lengths = collector.pop_episodes()
        assert (returns, lengths) == ([5.0] * 4, [5] * 4)
        assert collector.pop_episodes() == ([], [])
        # 2 steps carried over: the next episodes end at rollout steps 2 and 7
        batch = collector.collect()
    np.testing.assert_array_equal(np.flatnonzero(batch["truncated"][:, 0]), [2, 7])
    assert batch["next_value"][2, 0] == BOOTSTRAP and batch["next_value"][7, 1] == BOOTSTRAP
    assert collector.pop_episodes() == ([5.0] * 4, [5] * 4)


def test_reset_clears_episode_progress():
    venv, policy, collector = make_collector(num_envs=2, num_steps=3, horizon=5)
    with venv:
        collector.collect()
        collector.reset(seed=1)
        collector.collect()
        collector.collect()  # 6 steps after the reset: one episode per env
    assert collector.episodes.lengths == [5, 5]


def test_warmup_steps_without_storing_and_restores_update_norm():
    venv, policy, collector = make_collector(num_envs=2, num_steps=4, horizon=5)
    with venv:
        steps = collector.warmup(3)
        assert steps == 6
        assert policy.update_norm_seen == [True, True, True]
        assert policy.update_norm is False
        batch = collector.collect()
    assert policy.update_norm_seen[3:] == [False] * 4
    # the rollout starts where warmup left off: episodes end at warmup step 3 + rollout step 2 = 5
    np.testing.assert_array_equal(np.flatnonzero(batch["truncated"][:, 0]), [1])


@pytest.mark.parametrize("num_steps", [1, 5])
def test_single_step_and_exact_horizon_rollouts(num_steps):
    venv, policy, collector = make_collector(num_envs=2, num_steps=num_steps, horizon=5)
    with venv:
        batch = collector.collect()
    assert batch["reward"].shape == (num_steps, 2)
    np.testing.assert_array_equal(batch["next_value"][-1], np.full(2, BOOTSTRAP))
