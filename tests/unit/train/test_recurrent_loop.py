"""Recurrent PPO through the training loop and `relayrl eval`, and where it is refused."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from relayrl.errors import ConfigError
from relayrl.io.checkpoint import load_checkpoint
from relayrl.train.evaluate import evaluate_checkpoint, load_policy
from relayrl.train.loop import train

RECURRENT = ("env.id=relayrl/CartPoleNoVel-v1", "ppo.recurrent=lstm", "ppo.recurrent_hidden=16", "ppo.seq_len=8",
             "ppo.batch_trajectories=4")


def test_recurrent_ppo_trains_checkpoints_and_evaluates(tmp_path, tiny_config):
    summary = train(tiny_config(*RECURRENT, total_steps=128), run_dir=tmp_path / "r", tensorboard=False)
    assert summary["env_steps"] == 128 and summary["updates"] > 0
    ckpt = load_checkpoint(tmp_path / "r" / "checkpoints" / "last.safetensors")
    policy, _, env_id = load_policy(ckpt)
    assert policy.recurrent and env_id == "relayrl/CartPoleNoVel-v1"
    out = evaluate_checkpoint(tmp_path / "r", episodes=3)
    assert out["episodes"] == 3 and out["return_mean"] > 0
    # deterministic: the states restart with every evaluation
    assert evaluate_checkpoint(tmp_path / "r", episodes=3)["return_mean"] == out["return_mean"]


def test_memory_env_hides_the_velocities():
    from relayrl.envs import make

    env, full = make("relayrl/CartPoleNoVel-v1"), make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    full_obs, _ = full.reset(seed=3)
    assert env.observation_space.shape == (2,) and env.spec.max_episode_steps == 500
    np.testing.assert_array_equal(obs, full_obs[[0, 2]])
    obs, *_ = env.step(1)
    full_obs, *_ = full.step(1)
    np.testing.assert_array_equal(obs, full_obs[[0, 2]])


class AgentEnvStub:
    """Just enough of an agent env (train/agents.py) to reach the loop's checks."""

    agent_batches = True
    single_observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    single_action_space = gym.spaces.Discrete(2)
    num_envs = 4

    def close(self):
        pass


def test_agent_envs_refuse_recurrent_policies(tmp_path, tiny_config):
    with pytest.raises(ConfigError, match="ppo.recurrent=null"):
        train(tiny_config("ppo.recurrent=gru"), run_dir=tmp_path / "r",
              make_envs=lambda config: (AgentEnvStub(), AgentEnvStub()))
    assert not (tmp_path / "r").exists()  # refused before the run directory is written


def test_a_mirror_spec_that_does_not_fit_the_env_stops_before_training(tmp_path, tiny_config):
    spec = tmp_path / "spec.yaml"
    spec.write_text("obs: [0.1, 1, 2]\nact: [1, 0.1]\n")
    with pytest.raises(ConfigError, match="3 entries but the observation has 4 elements"):
        train(tiny_config("ppo.mirror=1.0", f"ppo.mirror_spec={spec}"), run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_rollout_workers_carry_their_own_states(tmp_path, tiny_config):
    from relayrl.runtime import train as train_with_workers

    # each worker's collector keeps its envs' states; the chunks join along the env axis, states included
    config = tiny_config(*RECURRENT, "backend=inline", "workers=2", total_steps=256)
    summary = train_with_workers(config, run_dir=tmp_path / "r", tensorboard=False)
    assert summary["env_steps"] == 256 and summary["updates"] > 0
