"""relayrl.envs.registry: make by id with clear errors, stop values."""

from __future__ import annotations

import gymnasium as gym
import pytest

from relayrl.envs import make, make_vec, spec_stop_value
from relayrl.envs.vector import SyncVectorEnv
from relayrl.errors import EnvError


def test_make_known_id_with_options():
    env = make("CartPole-v1", max_episode_steps=3)
    try:
        env.reset(seed=0)
        truncated = False
        for _ in range(3):
            _, _, terminated, truncated, _ = env.step(0)
            assert not terminated
        assert truncated
    finally:
        env.close()


def test_unknown_id_suggests_close_match():
    with pytest.raises(EnvError) as info:
        make("CartPol-v1")
    message = str(info.value)
    assert "'CartPol-v1'" in message
    assert "did you mean 'CartPole-v1'" in message


def test_unknown_id_without_close_match_says_what_to_do():
    with pytest.raises(EnvError, match="check the spelling"):
        make("zzqx-nothing-like-it-v9")


def test_make_vec_unknown_id_raises_env_error():
    with pytest.raises(EnvError, match="did you mean 'CartPole-v1'"):
        make_vec("CartPol-v1", num_envs=2)


def test_bad_kwargs_raise_env_error():
    with pytest.raises(EnvError, match="kwargs") as info:
        make("CartPole-v1", not_a_kwarg=3)
    assert "not_a_kwarg" in str(info.value)


def test_spec_stop_value():
    assert spec_stop_value("CartPole-v1") == 475.0
    assert spec_stop_value("Pendulum-v1") is None
    with pytest.raises(EnvError, match="did you mean 'CartPole-v1'"):
        spec_stop_value("CartPol-v1")


class TextObsEnv(gym.Env):
    """An observation space relayrl cannot lay out in fixed-shape arrays."""

    observation_space = gym.spaces.Text(max_length=8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "hello", {}

    def step(self, action):
        return "hello", 0.0, False, False, {}


def test_unsupported_observation_space_refused_clearly():
    with pytest.raises(EnvError) as info:
        SyncVectorEnv([TextObsEnv, TextObsEnv])
    message = str(info.value)
    assert "observation space" in message and "not supported" in message
    assert str(TextObsEnv.observation_space) in message  # names the value
    assert "Box" in message  # and what is expected


def test_unsupported_observation_space_refused_through_make_vec():
    with pytest.raises(EnvError, match="not supported"):
        make_vec(TextObsEnv, num_envs=2, seed=0)


def test_a_bridge_id_outside_training_names_what_it_is():
    from relayrl.envs.registry import make
    from relayrl.errors import EnvError

    with pytest.raises(EnvError, match="external simulator, not a Gymnasium env"):
        make("bridge:./my_sim")
