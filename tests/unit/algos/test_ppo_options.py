"""PPO options that only make sense together, and threads=-1 timing PPO's own update."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from relayrl.algos.ppo import PPO
from relayrl.config import build_config
from relayrl.errors import ConfigError
from relayrl.policy.recurrent import RecurrentActorCritic
from relayrl.training import threads
from relayrl.training.trainer import run_trainer


@pytest.mark.parametrize("sets, message", [
    (["ppo.prenorm=true"], "ppo.prenorm=true fills observation statistics, but ppo.obs_norm=false keeps none: "
                           "set ppo.obs_norm=true, or ppo.prenorm=false"),
    (["ppo.update_norm=true"], "ppo.update_norm=true has no effect with ppo.obs_norm=false"),
    (["ppo.update_norm=false"], "set ppo.obs_norm=true, or leave ppo.update_norm at null"),
], ids=["prenorm", "update_norm=true", "update_norm=false"])
def test_normaliser_options_without_obs_norm_are_refused_before_the_run_directory(tmp_path, tiny_config, sets,
                                                                                  message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        run_trainer(tiny_config(*sets), run_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_normaliser_options_with_obs_norm_are_accepted_and_update_norm_defaults_to_on():
    cfg = build_config("ppo", None, ["ppo.obs_norm=true", "ppo.prenorm=true", "ppo.update_norm=false"]).ppo
    cfg.check()
    default = build_config("ppo", None, []).ppo
    default.check()  # the defaults themselves are consistent
    assert default.update_norm is None
    obs, act = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)
    on = PPO(build_config("ppo", None, ["ppo.obs_norm=true"]).ppo, obs, act, 2).policy
    on.act(np.ones((2, 3), np.float32), "collect")
    frozen = PPO(cfg, obs, act, 2).policy
    frozen.act(np.ones((2, 3), np.float32), "collect")
    assert on.update_norm and on.obs_rms.count == 2
    assert not frozen.update_norm and frozen.obs_rms.count == 0


def test_threads_minus_one_given_to_the_plain_loop_is_resolved_and_recorded(tmp_path, tiny_config, capsys):
    before = torch.get_num_threads()
    try:
        summary = run_trainer(tiny_config("threads=-1", "ppo.recurrent=gru", "ppo.recurrent_hidden=8", "ppo.seq_len=8",
                                          total_steps=32), run_dir=tmp_path / "r", tensorboard=False)
        picked = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert summary["env_steps"] == 32
    saved = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert saved["threads"] >= 1 and saved["threads"] == picked
    assert f"threads=-1 picked {picked} torch thread" in capsys.readouterr().err


def recorded_forwards(monkeypatch) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []
    forward = RecurrentActorCritic.forward

    def recording(self, obs, state, critic=True):
        shapes.append(tuple(obs.shape))
        return forward(self, obs, state, critic)
    monkeypatch.setattr(RecurrentActorCritic, "forward", recording)
    return shapes


def test_threads_are_timed_on_the_algorithms_own_recurrent_update(monkeypatch):
    cfg = build_config("ppo", None, ["ppo.recurrent=lstm", "ppo.recurrent_hidden=8", "ppo.seq_len=8",
                                     "ppo.num_steps=16", "ppo.batch_trajectories=3", "threads=-1"])
    torch.manual_seed(0)
    algo = PPO(cfg.ppo, gym.spaces.Box(-1, 1, (5,), np.float32), gym.spaces.Discrete(2), 4)
    timed = []
    monkeypatch.setattr(threads, "time_threads", lambda step: timed.append(step) or (1, {1: 1e-3}))
    own = [p.detach().clone() for p in algo.policy.model.parameters()]
    rng = torch.get_rng_state()
    assert threads.resolve_threads(cfg, algo).threads == 1
    assert torch.equal(torch.get_rng_state(), rng)  # the run's random stream is left where it was

    shapes = recorded_forwards(monkeypatch)
    timed[0]()
    # 4 envs x 16 steps in chunks of 8: 8 sequences, minibatches of at most 3 (3, 3, 2); the first is timed
    assert shapes == [(3, 8, 5)]
    assert all(torch.equal(a, b) for a, b in zip(own, algo.policy.model.parameters()))  # a copy was trained


def test_the_timed_update_includes_the_mirror_term_and_feed_forward_times_its_minibatch(tmp_path, monkeypatch):
    spec = tmp_path / "spec.yaml"
    spec.write_text("obs: [1, 0.1, -2]\nact: [1, 0.1]\n")
    box = gym.spaces.Box(-1, 1, (3,), np.float32)
    cfg = build_config("ppo", None, ["ppo.recurrent=gru", "ppo.seq_len=4", "ppo.num_steps=8", "ppo.mirror=1",
                                     f"ppo.mirror_spec={spec}"]).ppo
    algo = PPO(cfg, box, gym.spaces.Box(-1, 1, (2,), np.float32), 2)
    algo.bind_env("Toy-v0")
    shapes = recorded_forwards(monkeypatch)
    algo.timing_step()()
    assert shapes == [(4, 4, 3), (8, 4, 3)]  # the update's sequences, then them and their mirrors together

    mlp = PPO(build_config("ppo", None, ["ppo.batch_size=32", "ppo.num_steps=64"]).ppo, box,
              gym.spaces.Discrete(2), 2)
    batches = []
    forward = PPO.forward
    monkeypatch.setattr(PPO, "forward", lambda self, mb: batches.append(tuple(mb["obs"].shape)) or forward(self, mb))
    mlp.timing_step()()
    assert batches == [(32, 3)] and shapes == [(4, 4, 3), (8, 4, 3)]  # a minibatch of steps; no recurrent layer
