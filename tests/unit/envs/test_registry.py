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


USER_MODULE = '''
import gymnasium as gym
import numpy as np


class Good(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 1.0, False, False, {}


def make_good(size=3):
    return Good()


def make_raises():
    raise RuntimeError("no simulator licence found")


def make_parallel():
    from pettingzoo.butterfly import cooperative_pong_v6
    return cooperative_pong_v6.parallel_env()
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch, request):
    """A module of the user's own, importable under a name unique to the test."""
    name = f"usermod_{request.node.name.replace('[', '_').replace(']', '_').replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, tmp_path / f"{name}.py"


def _line(path, text):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_factory_that_raises_is_one_message_naming_the_factory_and_its_line(user_module):
    name, path = user_module
    with pytest.raises(EnvError) as info:
        make(f"{name}:make_raises")
    message = str(info.value)
    assert f"env '{name}:make_raises'" in message and "RuntimeError: no simulator licence found" in message
    assert f"{path}:{_line(path, 'raise RuntimeError')} in make_raises" in message
    assert info.value.exit_code == 2


def test_a_factory_given_arguments_it_does_not_take_names_them_and_its_signature(user_module):
    name, _ = user_module
    with pytest.raises(EnvError, match=r"does not take the arguments \{'colour': 1\}.*it takes \(size=3\)\): fix "
                                       r"env.kwargs"):
        make(f"{name}:make_good", colour=1)
    assert make(f"{name}:make_good", size=4).observation_space.shape == (3,)


def test_a_pettingzoo_factory_without_its_prefix_is_told_the_prefix(user_module):
    pytest.importorskip("pettingzoo")
    name, _ = user_module
    with pytest.raises(EnvError) as info:
        make(f"{name}:make_parallel")
    message = str(info.value)
    assert "PettingZoo multi-agent env" in message and f"--env pettingzoo:{name}:make_parallel" in message
    assert "env.kwargs" not in message  # (it was told to fix its kwargs)


def test_a_module_with_a_syntax_error_names_the_file_and_line(tmp_path, monkeypatch):
    (tmp_path / "broken_user_env.py").write_text("import gymnasium\n\ndef make_env(:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvError, match=r"env 'broken_user_env:make_env': cannot import module 'broken_user_env' "
                                       r"\(SyntaxError: invalid syntax .*\): fix the module at "
                                       rf"{tmp_path / 'broken_user_env.py'}:3$"):
        make("broken_user_env:make_env")


def test_an_env_whose_constructor_raises_is_one_message(user_module):
    name, path = user_module
    gym.register(f"{name}/Raises-v0", entry_point=f"{name}:make_raises")
    with pytest.raises(EnvError, match=rf"environment '{name}/Raises-v0' failed to build: RuntimeError: no simulator "
                                       rf"licence found \(at {path}:{_line(path, 'raise RuntimeError')} in "):
        make(f"{name}/Raises-v0")
