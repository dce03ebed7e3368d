"""Env-provided mirror indices: PPO's ``mirror_spec: auto`` takes roadrunner's
``get_observation_mirror_indices()`` / ``get_action_mirror_indices()`` from the (unwrapped) env when
there is no built-in spec; wrong ones stop the run before anything is written, naming the method."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import relayrl.testing.envs  # noqa: F401  (registers relayrl-test/MirrorCartPole-v0)
from relayrl import launch
from relayrl.envs.mirror_source import read_mirror_indices
from relayrl.envs.registry import make
from relayrl.errors import ConfigError, EnvError
from relayrl.training.trainer import Trainer, run_trainer
from relayrl.training.experience import GymExperience

ENV = "relayrl-test/MirrorCartPole-v0"


def test_the_indices_are_read_through_wrappers_and_reflect_the_env():
    env = make(ENV)  # TimeLimit, order checks, ... around the env that defines the methods
    try:
        indices = read_mirror_indices(env, ENV)
    finally:
        env.close()
    spec = indices.spec(4, 2)
    mirror = spec.torch()
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert mirror.obs(x).tolist() == [[-1.0, -2.0, -3.0, -4.0]]  # -0.1: index 0, negated
    assert mirror.act(torch.tensor([5.0, 6.0])).tolist() == [6.0, 5.0]


def test_an_env_without_the_methods_gives_none():
    env = gym.make("CartPole-v1")
    try:
        assert read_mirror_indices(env, "CartPole-v1") is None
    finally:
        env.close()


def test_ppo_auto_takes_the_envs_indices_and_trains_with_the_mirror_loss(tiny_config, tmp_path):
    config = tiny_config("ppo.mirror=1.0", "ppo.mirror_spec=auto", f"env.id={ENV}", total_steps=64)
    experience = GymExperience(config, on_policy=True)
    trainer = Trainer(config, experience, run_dir=tmp_path / "r", tensorboard=False)
    np.testing.assert_array_equal(trainer.algo.mirror.spec.obs_sign, [-1, -1, -1, -1])
    np.testing.assert_array_equal(trainer.algo.mirror.spec.act_index, [1, 0])
    trainer.run()
    train = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
             if '"train"' in line]
    assert all(np.isfinite(r["train/loss/mirror"]) for r in train)


def test_mp_rollout_workers_train_with_the_indices_the_learner_reads_from_its_own_env(tiny_config, tmp_path):
    # (without them the run stops at once: the env has no built-in spec)
    config = tiny_config("ppo.mirror=1.0", f"env.id=relayrl.testing.envs:{ENV}", "backend=mp", "workers=2",
                         total_steps=128)
    summary = launch.run(config, run_dir=tmp_path / "r", tensorboard=False)
    assert summary["backend"] == "mp" and summary["env_steps"] == 128
    train = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
             if '"train"' in line]
    assert train and all(np.isfinite(r["train/loss/mirror"]) for r in train)


@pytest.mark.parametrize("mistake, words", [
    ("length", "get_observation_mirror_indices\\(\\) .* 3 entries but the observation has 4 elements.*return 4 signed"),
    ("range", "get_observation_mirror_indices\\(\\) .* points past its end"),
    ("not_reflection", "get_observation_mirror_indices\\(\\) .* not a reflection"),
    ("no_action_method", "defines get_observation_mirror_indices\\(\\) but not get_action_mirror_indices"),
    ("raises", "get_observation_mirror_indices\\(\\) failed: RuntimeError: no mirror yet"),
])
def test_bad_indices_stop_the_run_before_anything_is_written(tiny_config, tmp_path, mistake, words):
    config = tiny_config("ppo.mirror=1.0", f"env.id={ENV}", f"env.kwargs={{mistake: {mistake}}}")
    with pytest.raises(EnvError, match=words):
        run_trainer(config, run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_bad_indices_exit_2_in_the_cli_with_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", f"relayrl.testing.envs:{ENV}",
                          "--set", "ppo.mirror=1.0", "--set", "env.kwargs={mistake: length}", "--total-steps", "64",
                          "--run-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "get_observation_mirror_indices()" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r").exists()


def test_a_trainer_without_an_env_of_its_own_refuses_auto_clearly(tiny_config):
    from relayrl.training.experience import SourceExperience

    config = tiny_config("ppo.mirror=1.0", f"env.id={ENV}")
    space = gym.make("CartPole-v1")
    experience = SourceExperience(config, samples=None, spaces=(space.observation_space, space.action_space),
                                  evaluator=object())
    with pytest.raises(ConfigError, match="no env of its own .*remote-env.*ppo.mirror_spec=FILE.yaml"):
        experience.mirror_indices()
