"""The preprocessing users expect from an env id (relayrl/envs/registry.py): Atari games as 4 stacked
84x84 grayscale frames, MinAtar as channel-first uint8, frame stacks of any Box env, in every process."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from relayrl.config import build_config
from relayrl.envs import make
from relayrl.envs.managers import make_vec
from relayrl.errors import EnvError


def test_an_atari_id_gets_the_standard_preprocessing_and_four_stacked_frames():
    env = make("ALE/Breakout-v5")
    raw = make("ALE/Breakout-v5", atari_preprocessing=False)
    try:
        assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        for _ in range(3):  # FIRE, then the stack moves by one frame per step
            previous = obs
            obs, *_ = env.step(1)
        np.testing.assert_array_equal(obs[:3], previous[1:])
        assert raw.observation_space.shape == (210, 160, 3)  # the raw RGB frames on request
        assert raw.unwrapped._frameskip == 4 and env.unwrapped._frameskip == 1  # never skipped twice
    finally:
        env.close()
        raw.close()


def test_a_minatar_id_registers_on_first_use_and_keeps_its_boolean_planes():
    env = make("MinAtar/Breakout-v1")
    try:
        obs, _ = env.reset(seed=3)
        assert env.observation_space.shape == (10, 10, 4) and obs.dtype == bool
    finally:
        env.close()


def test_frame_stacks_keep_the_newest_observation_last_and_images_one_image():
    stacked, plain = make("CartPole-v1", frame_stack=3), make("CartPole-v1")
    obs, _ = stacked.reset(seed=1)
    first, _ = plain.reset(seed=1)
    assert obs.shape == (3, 4)
    np.testing.assert_array_equal(obs[-1], first)
    np.testing.assert_array_equal(obs[0], first)  # padded with the first observation (Gymnasium's default)
    new, *_ = stacked.step(0)
    step, *_ = plain.step(0)
    np.testing.assert_array_equal(new[-1], step)
    np.testing.assert_array_equal(new[-2], first)

    minatar = make("MinAtar/Seaquest-v1", frame_stack=2)  # [10, 10, 10]: a tie reads channels-last -> [10, 10, 20]
    obs, _ = minatar.reset(seed=0)
    assert obs.shape == (10, 10, 20)
    newer, *_ = minatar.step(0)
    np.testing.assert_array_equal(newer[..., :10], obs[..., 10:])

    first_layout = make("relayrl.testing.envs:relayrl-test/ImageBandit-v0", frame_stack=3,
                        channels=2, channels_first=True)  # [2, 8, 8] -> [6, 8, 8]
    obs, _ = first_layout.reset(seed=0)
    assert obs.shape == (6, 8, 8)
    newer, *_ = first_layout.step(0)
    np.testing.assert_array_equal(newer[:4], obs[2:])
    assert make("ALE/Breakout-v5", frame_stack=2).observation_space.shape == (2, 84, 84)  # instead of Atari's 4

    last_layout = make("ALE/Breakout-v5", atari_preprocessing=False, frame_stack=2)  # [H, W, C] -> [H, W, 2C]
    obs, _ = last_layout.reset(seed=0)
    assert obs.shape == (210, 160, 6)
    newer, *_ = last_layout.step(0)
    np.testing.assert_array_equal(newer[..., :3], obs[..., 3:])
    for env in (stacked, plain, minatar, first_layout, last_layout):
        env.close()


def test_the_config_reaches_envs_made_in_worker_processes():
    env = build_config("ppo", None, ["env.frame_stack=2"], {}).env
    with make_vec("CartPole-v1", 2, manager="subproc", workers=2, wrapping=env.wrapping()) as venv:
        assert venv.single_observation_space.shape == (2, 4) and venv.reset(seed=0).shape == (2, 2, 4)


@pytest.mark.parametrize("env_id, module, extra", [("ALE/Pong-v5", "ale_py", "atari"),
                                                   ("MinAtar/Breakout-v1", "minatar", "minatar")])
def test_an_id_whose_package_is_missing_names_the_extra_to_install(env_id, module, extra):
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from relayrl.envs import make\n"
            "from relayrl.errors import EnvError\n"
            f"try:\n    make({env_id!r})\nexcept EnvError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"'.[{extra}]'" in out.stdout and env_id in out.stdout


def test_frame_stacks_of_observations_that_are_no_box_are_refused():
    with pytest.raises(EnvError, match="env.frame_stack=1"):
        make("FrozenLake-v1", frame_stack=2)
