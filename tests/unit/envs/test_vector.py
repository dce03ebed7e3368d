"""relayrl.envs.vector: SyncVectorEnv / make_vec on real Gymnasium envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from relayrl.envs import make, make_vec
from relayrl.envs.vector import SyncVectorEnv, VectorEnv
from relayrl.errors import EnvError
from relayrl.types import StepResult


def cartpole_actions(t: int, n: int) -> np.ndarray:
    """Alternating pushes: CartPole stays upright for well over 5 steps."""
    return np.array([(t + k) % 2 for k in range(n)], dtype=np.int64)


def pendulum_actions(t: int, n: int) -> np.ndarray:
    return np.array([[np.sin(t + k)] for k in range(n)], dtype=np.float32)


@pytest.mark.parametrize("env_id, obs_dim, action_fn", [
    ("CartPole-v1", 4, cartpole_actions),
    ("Pendulum-v1", 3, pendulum_actions),
])
def test_step_result_shapes_and_dtypes(env_id, obs_dim, action_fn):
    n = 3
    with make_vec(env_id, num_envs=n, seed=0) as venv:
        assert isinstance(venv, VectorEnv) and venv.num_envs == n
        obs = venv.reset(seed=0)
        assert obs.shape == (n, obs_dim) and obs.dtype == np.float32
        result = venv.step(action_fn(0, n))
        assert isinstance(result, StepResult)
        assert result.obs.shape == (n, obs_dim) and result.obs.dtype == np.float32
        assert result.final_obs.shape == (n, obs_dim) and result.final_obs.dtype == np.float32
        assert result.reward.shape == (n,) and result.reward.dtype == np.float32
        assert result.terminated.shape == (n,) and result.terminated.dtype == np.bool_
        assert result.truncated.shape == (n,) and result.truncated.dtype == np.bool_
        assert result.done.shape == (n,) and result.done.dtype == np.bool_
        np.testing.assert_array_equal(result.env_ids, np.arange(n))
        assert len(result.info) == n and all(isinstance(i, dict) for i in result.info)
        if env_id == "CartPole-v1":
            np.testing.assert_array_equal(result.reward, np.ones(n, np.float32))
        else:
            assert np.all(result.reward <= 0)


def test_returned_arrays_are_copies():
    with make_vec("Pendulum-v1", num_envs=2, seed=0) as venv:
        obs = venv.reset(seed=0)
        first = venv.step(pendulum_actions(0, 2))
        kept_obs, kept_first = obs.copy(), first.obs.copy()
        venv.step(pendulum_actions(1, 2))
        np.testing.assert_array_equal(obs, kept_obs)
        np.testing.assert_array_equal(first.obs, kept_first)


@pytest.mark.parametrize("env_id, action_fn", [("CartPole-v1", cartpole_actions),
                                               ("Pendulum-v1", pendulum_actions)])
def test_autoreset_keeps_final_observation(env_id, action_fn):
    n, seed, horizon = 2, 11, 5
    venv = make_vec(env_id, num_envs=n, seed=seed, max_episode_steps=horizon)
    singles = [make(env_id, max_episode_steps=horizon) for _ in range(n)]
    try:
        obs = venv.reset(seed=seed)
        for k, env in enumerate(singles):
            single_obs, _ = env.reset(seed=seed + k)
            np.testing.assert_array_equal(obs[k], single_obs)

        for t in range(2 * horizon + 2):
            actions = action_fn(t, n)
            result = venv.step(actions)
            for k, env in enumerate(singles):
                action = int(actions[k]) if env_id == "CartPole-v1" else actions[k]
                single_obs, reward, term, trunc, _ = env.step(action)
                assert not term
                assert result.truncated[k] == trunc == ((t + 1) % horizon == 0)
                assert result.reward[k] == np.float32(reward)
                if trunc:
                    # final_obs is the obs returned on the truncating step ...
                    np.testing.assert_array_equal(result.final_obs[k], single_obs)
                    # ... and obs is the first obs of the next episode
                    single_obs, _ = env.reset()
                    assert not np.array_equal(result.obs[k], result.final_obs[k])
                np.testing.assert_array_equal(result.obs[k], single_obs)
    finally:
        venv.close()
        for env in singles:
            env.close()


def run_vec(env_id, seed, steps, action_fn, n=3, **kwargs):
    with make_vec(env_id, num_envs=n, seed=seed, **kwargs) as venv:
        out = [venv.reset(seed=seed)]
        for t in range(steps):
            result = venv.step(action_fn(t, n))
            out += [result.obs, result.reward, result.final_obs[result.done]]
    return out


@pytest.mark.parametrize("env_id, action_fn", [("CartPole-v1", cartpole_actions),
                                               ("Pendulum-v1", pendulum_actions)])
def test_same_seed_gives_identical_vector_envs(env_id, action_fn):
    a = run_vec(env_id, 5, 12, action_fn, max_episode_steps=4)
    b = run_vec(env_id, 5, 12, action_fn, max_episode_steps=4)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    c = run_vec(env_id, 6, 12, action_fn, max_episode_steps=4)
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_per_env_seeds_are_seed_plus_k(env_id):
    n, seed = 4, 21
    with make_vec(env_id, num_envs=n, seed=seed) as venv:
        obs = venv.reset(seed=seed)
    for k in range(n):
        env = make(env_id)
        expected, _ = env.reset(seed=seed + k)
        env.close()
        np.testing.assert_array_equal(obs[k], expected)
    # different envs start differently
    for i in range(n):
        for j in range(i + 1, n):
            assert not np.array_equal(obs[i], obs[j])
    # a vector env seeded with seed+1 starts its env 0 where this one's env 1 started
    with make_vec(env_id, num_envs=2, seed=seed + 1) as shifted:
        np.testing.assert_array_equal(shifted.reset(seed=seed + 1)[0], obs[1])


def test_action_spaces_seeded_per_env():
    with make_vec("CartPole-v1", num_envs=3, seed=4) as venv:
        samples = [[int(env.action_space.sample()) for _ in range(32)] for env in venv.envs]
    with make_vec("CartPole-v1", num_envs=3, seed=4) as venv:
        again = [[int(env.action_space.sample()) for _ in range(32)] for env in venv.envs]
    assert samples == again
    assert samples[0] != samples[1]


@pytest.mark.parametrize("env_id, bad, expected", [
    ("CartPole-v1", np.zeros(3, np.int64), "(2,)"),
    ("CartPole-v1", np.zeros((2, 1), np.int64), "(2,)"),
    ("Pendulum-v1", np.zeros(2, np.float32), "(2, 1)"),
    ("Pendulum-v1", np.zeros((2, 2), np.float32), "(2, 1)"),
])
def test_wrong_action_shape_raises_env_error(env_id, bad, expected):
    with make_vec(env_id, num_envs=2, seed=0) as venv:
        with pytest.raises(EnvError) as info:
            venv.step(bad)
        message = str(info.value)
        assert f"expected {expected}" in message
        assert str(bad.shape) in message
        # the failed send left nothing pending
        with pytest.raises(EnvError, match="without a pending send"):
            venv.recv()


def test_recv_without_send_raises_env_error():
    with make_vec("CartPole-v1", num_envs=2, seed=0) as venv:
        with pytest.raises(EnvError, match="send"):
            venv.recv()
        venv.send(cartpole_actions(0, 2))
        venv.recv()
        with pytest.raises(EnvError, match="send"):
            venv.recv()  # one send, one recv


def test_send_then_recv_equals_step():
    with make_vec("Pendulum-v1", num_envs=2, seed=3) as a, make_vec("Pendulum-v1", num_envs=2, seed=3) as b:
        for t in range(3):
            a.send(pendulum_actions(t, 2))
            ra, rb = a.recv(), b.step(pendulum_actions(t, 2))
            np.testing.assert_array_equal(ra.obs, rb.obs)
            np.testing.assert_array_equal(ra.reward, rb.reward)


class CloseTrackingEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.closed = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def close(self):
        self.closed = True


def test_context_manager_closes_every_env():
    with SyncVectorEnv([CloseTrackingEnv] * 3) as venv:
        venv.reset(seed=0)
        envs = list(venv.envs)
        assert len(envs) == 3 and not any(env.closed for env in envs)
    assert all(env.closed for env in envs)
    assert list(venv.envs) == []


def test_context_manager_closes_on_error():
    with pytest.raises(RuntimeError, match="boom"):
        with SyncVectorEnv([CloseTrackingEnv] * 2) as venv:
            envs = list(venv.envs)
            raise RuntimeError("boom")
    assert len(envs) == 2 and all(env.closed for env in envs)


def test_empty_factory_list_refused():
    with pytest.raises(EnvError, match="num_envs >= 1"):
        SyncVectorEnv([])


def test_make_vec_with_factory_and_max_episode_steps():
    factory = lambda: gym.wrappers.TimeLimit(CloseTrackingEnv(), max_episode_steps=2)  # noqa: E731
    with make_vec(factory, num_envs=2, seed=0) as venv:
        assert venv.num_envs == 2
        first = venv.step(np.zeros(2, np.int64))
        second = venv.step(np.zeros(2, np.int64))
        assert not first.truncated.any() and second.truncated.all()
