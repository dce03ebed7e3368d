"""``env.grayscale`` and ``env.resize`` (relayrl/envs/imageobs.py): Gymnasium's own wrappers from the config, in
every process that makes the env, per agent for PettingZoo envs, recorded so eval and load rebuild them."""

from __future__ import annotations

import cv2
import gymnasium as gym
import numpy as np
import pytest

from relayrl.config import build_config, read_yaml
from relayrl.envs import make
from relayrl.envs.managers import make_vec
from relayrl.errors import ConfigError, EnvError

PONG = "pettingzoo:pettingzoo.butterfly.cooperative_pong_v6:parallel_env"  # 280x480 RGB per agent (the docs' example)
SHRINK = ["env.resize=[84,84]", "env.grayscale=true"]


def resize_and_gray(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """What ResizeObservation then GrayscaleObservation make of an RGB frame (their documented formulas)."""
    small = cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
    return np.sum(np.multiply(small, np.array([0.2125, 0.7154, 0.0721])), axis=-1).astype(np.uint8)[:, :, None]


def test_resize_and_grayscale_shrink_raw_atari_frames_before_the_stack():
    raw = make("ALE/Pong-v5", atari_preprocessing=False)
    env = make("ALE/Pong-v5", atari_preprocessing=False, grayscale=True, resize=[84, 64], frame_stack=2)
    try:
        assert env.observation_space == gym.spaces.Box(0, 255, (84, 64, 2), np.uint8)  # channels last: the stack
        frame, _ = raw.reset(seed=1)
        obs, _ = env.reset(seed=1)
        expected = resize_and_gray(frame, 84, 64)
        np.testing.assert_array_equal(obs, np.concatenate([expected, expected], axis=2))  # a reset fills the stack
    finally:
        raw.close()
        env.close()


def test_the_config_reaches_envs_made_in_worker_processes():
    env = build_config("ppo", None, ["env.id=ALE/Pong-v5", "env.atari_preprocessing=false", *SHRINK], {}).env
    with make_vec(env.id, 2, manager="subproc", workers=2, wrapping=env.wrapping()) as venv:
        assert venv.single_observation_space.shape == (84, 84, 1) and venv.reset(seed=0).shape == (2, 84, 84, 1)


def test_observations_the_wrappers_cannot_take_are_refused_naming_the_option():
    with pytest.raises(EnvError, match=r"env.grayscale=true takes channels-last RGB images.*drop env.grayscale=true"):
        make("CartPole-v1", grayscale=True)
    with pytest.raises(EnvError, match=r"env.resize=\[20,20\] takes uint8 images.*bool.*drop env.resize=\[20,20\]"):
        make("MinAtar/Breakout-v1", resize=[20, 20])  # bool planes
    with pytest.raises(EnvError, match=r"native manager takes no wrappers \(env.resize=\[8,8\]\)"):
        make_vec("CartPole-v1", 2, manager="native", wrapping={"resize": [8, 8]})
    with pytest.raises(ConfigError, match="env.resize"):
        build_config("ppo", None, ["env.resize=[84]"], {})


def test_pettingzoo_agents_get_the_same_processing():
    from pettingzoo.butterfly import cooperative_pong_v6

    from relayrl.envs.multiagent import multiagent_envs

    config = build_config("ppo", None, [f"env.id={PONG}", "env.num_envs=1", "eval.num_envs=1", "eval.episodes=1",
                                        *SHRINK], {})
    train_env, eval_env = multiagent_envs(config)
    raw = cooperative_pong_v6.parallel_env()
    try:
        for venv in (train_env, eval_env):
            assert venv.single_observation_space == gym.spaces.Box(0, 255, (84, 84, 1), np.uint8)
        turn = train_env.reset(seed=5)
        frames, _ = raw.reset(seed=5)
        expected = np.stack([resize_and_gray(frames[agent], 84, 84) for agent in raw.agents])
        np.testing.assert_array_equal(turn.obs, expected)
    finally:
        train_env.close()
        eval_env.close()
        raw.close()


def test_a_pettingzoo_run_records_the_options_and_eval_and_load_rebuild_them(tmp_path):
    import relayrl
    from relayrl.training.saved_policy import evaluate_checkpoint

    run_dir = tmp_path / "run"
    config = {"env": {"num_envs": 1, "kwargs": {"max_cycles": 20}, "resize": [84, 84], "grayscale": True},
              "ppo": {"num_steps": 8, "batch_size": 8, "epochs": 1}, "eval": {"freq": 0, "episodes": 1, "num_envs": 1}}
    relayrl.train("ppo", PONG, config, run_dir=run_dir, total_steps=16, tensorboard=False)
    saved = read_yaml(run_dir / "config.yaml")["env"]
    assert saved["resize"] == [84, 84] and saved["grayscale"] is True
    policy = relayrl.load(run_dir)
    assert policy.observation_space.shape == (84, 84, 1)
    assert policy.predict(np.zeros((84, 84, 1), np.uint8)) in (0, 1, 2)
    assert evaluate_checkpoint(run_dir, episodes=1)["episodes"] >= 1
