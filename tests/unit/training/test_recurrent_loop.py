"""Recurrent PPO through the training loop and `relayrl eval`, and where it is refused (agent envs take it since
issue 26: tests/integration/test_recurrent_agents.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from relayrl.errors import ConfigError
from relayrl.io.checkpoint import load_checkpoint
from relayrl.training.saved_policy import evaluate_checkpoint, load_policy
from relayrl.training.trainer import run_trainer

RECURRENT = ("env.id=relayrl/CartPoleNoVel-v1", "ppo.recurrent=lstm", "ppo.recurrent_hidden=16", "ppo.seq_len=8",
             "ppo.batch_trajectories=4")


def test_recurrent_ppo_trains_checkpoints_and_evaluates(tmp_path, tiny_config):
    summary = run_trainer(tiny_config(*RECURRENT, total_steps=128), run_dir=tmp_path / "r", tensorboard=False)
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


def test_a_mirror_spec_that_does_not_fit_the_env_stops_before_training(tmp_path, tiny_config):
    spec = tmp_path / "spec.yaml"
    spec.write_text("obs: [0.1, 1, 2]\nact: [1, 0.1]\n")
    with pytest.raises(ConfigError, match="3 entries but the observation has 4 elements"):
        run_trainer(tiny_config("ppo.mirror=1.0", f"ppo.mirror_spec={spec}"), run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_rollout_workers_carry_their_own_states(tmp_path, tiny_config, monkeypatch):
    from relayrl import launch
    from relayrl.algos.ppo import PPO

    learned = []  # each rollout the learner got, with the weights that collected it (synchronous on-policy)
    learn = PPO.learn
    monkeypatch.setattr(PPO, "learn", lambda self, rollout, progress=0.0: learned.append(
        (rollout, copy.deepcopy(self.policy.model))) or learn(self, rollout, progress))
    config = tiny_config(*RECURRENT, "backend=inline", "workers=2", total_steps=256)
    summary = launch.run(config, run_dir=tmp_path / "r", tensorboard=False)
    assert summary["env_steps"] == 256 and len(learned) == 4  # 2 workers x 2 envs x 16 steps per rollout

    # each worker's collector keeps its envs' states; the chunks join along the env axis, states included:
    # replaying every column from its stored first state, resetting where episodes end, gives the stored
    # states, and each rollout's first states continue the previous rollout's columns
    carried = np.zeros((4, learned[0][0]["hidden"].shape[-1]), np.float32)  # every env starts an episode
    for rollout, model in learned:
        obs, hidden = rollout["obs"], rollout["hidden"]
        done = rollout["terminated"] | rollout["truncated"]
        assert hidden.shape[:2] == (16, 4) and rollout["column"][0].tolist() == [0, 1, 2, 3]
        np.testing.assert_allclose(hidden[0], carried, atol=1e-5)
        state = torch.from_numpy(hidden[0])
        with torch.no_grad():
            for t in range(len(obs)):
                np.testing.assert_allclose(hidden[t], state.numpy(), atol=1e-5, err_msg=f"step {t}")
                state = model(torch.from_numpy(obs[t])[:, None], state)[2]
                state = state.masked_fill(torch.from_numpy(done[t])[:, None], 0.0)
        carried = state.numpy()
        assert np.abs(hidden[:, :2] - hidden[:, 2:]).max() > 1e-3  # two workers, two different histories
    assert sum(int(r["terminated"].sum() + r["truncated"].sum()) for r, _ in learned) >= 4  # resets were tested
