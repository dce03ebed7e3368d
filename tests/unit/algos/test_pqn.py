"""PQN (relayrl/algos/pqn.py): Q(lambda) targets and the update on a tiny rollout, epsilon-greedy collection,
checkpoints, and the refusals (continuous actions, a single env) through the CLI."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import relayrl
from relayrl.algos import get_algo
from relayrl.algos.pqn import PQN
from relayrl.cli import main
from relayrl.config import build_config
from relayrl.envs import make
from relayrl.envs.managers import make_vec
from relayrl.errors import ConfigError, EnvError
from relayrl.policy.encoders import DictEncoder
from relayrl.training.collector import OnPolicyCollector

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)


def build(*sets, act_space=gym.spaces.Discrete(3), obs_space=OBS, num_envs=2) -> PQN:
    torch.manual_seed(0)
    cfg = build_config("pqn", None, list(sets)).pqn
    return get_algo("pqn").build_algorithm(cfg, obs_space, act_space, num_envs)


def test_collect_gives_max_q_as_the_value_and_the_epsilon_greedy_logp():
    algo = build("pqn.epsilon_start=0.3")
    policy, obs = algo.policy, np.random.default_rng(0).uniform(-1, 1, (400, 3)).astype(np.float32)
    q = policy.model(torch.from_numpy(obs)).detach()
    out = policy.act(obs, "collect")
    np.testing.assert_allclose(out.value, q.max(-1).values.numpy(), rtol=1e-6)
    np.testing.assert_allclose(policy.value(obs), out.value, rtol=1e-6)
    greedy = (out.action == q.argmax(-1).numpy())
    assert 0.7 < greedy.mean() < 0.9  # 1 - 0.3 + 0.3 / 3 of them, give or take
    np.testing.assert_allclose(np.exp(out.logp), np.where(greedy, 0.7 + 0.1, 0.1), rtol=1e-5)
    assert np.array_equal(policy.act(obs, "eval").action, q.argmax(-1).numpy())
    assert out.obs.dtype == np.float32 and out.action.dtype == np.int64


def test_one_learn_regresses_q_on_the_q_lambda_returns_of_the_rollout():
    algo = build("pqn.gamma=0.9", "pqn.lam=0.5", "pqn.epochs=1", "pqn.minibatches=1", "pqn.grad_clip=null")
    model = copy.deepcopy(algo.policy.model)
    rng = np.random.default_rng(1)
    T, N = 3, 2
    obs = rng.uniform(-1, 1, (T, N, 3)).astype(np.float32)
    value = algo.policy.value(obs.reshape(-1, 3)).reshape(T, N)
    last = algo.policy.value(rng.uniform(-1, 1, (N, 3)).astype(np.float32))
    terminated = np.zeros((T, N), bool)
    terminated[1, 0] = True
    rollout = {"obs": obs, "action": rng.integers(0, 3, (T, N)).astype(np.int64), "logp": np.zeros((T, N), np.float32),
               "value": value, "reward": rng.normal(size=(T, N)).astype(np.float32), "terminated": terminated,
               "truncated": np.zeros((T, N), bool), "next_value": np.concatenate([value[1:], last[None]])}
    # CleanRL's Q(lambda): G_t = r_t + gamma (lam G_t+1 + (1 - lam) max Q(s_t+1)), 0 after a terminal step
    r, g, lam = rollout["reward"], 0.9, 0.5
    G = np.zeros((T, N), np.float32)
    G[2] = r[2] + g * last
    for t in (1, 0):
        G[t] = r[t] + g * (lam * G[t + 1] + (1 - lam) * value[t + 1]) * (1 - terminated[t])
    q = model(torch.from_numpy(obs.reshape(-1, 3))).gather(-1, torch.from_numpy(rollout["action"].reshape(-1, 1)))
    loss = 0.5 * (q.squeeze(-1) - torch.from_numpy(G.reshape(-1))).pow(2).mean()
    optim = torch.optim.RAdam(model.parameters(), lr=1e-3)
    loss.backward()
    optim.step()

    metrics = algo.learn(rollout)
    np.testing.assert_allclose(metrics["loss/td"], loss.item(), rtol=1e-5)
    for mine, theirs in zip(algo.policy.model.parameters(), model.parameters()):
        torch.testing.assert_close(mine, theirs)
    assert metrics["updates"] == 1 and algo.policy.version == 1


def test_layer_norm_epsilon_decay_and_checkpoint_round_trip():
    algo = build("pqn.epsilon_decay_steps=100", "pqn.epsilon_end=0.1")
    assert sum(isinstance(m, nn.LayerNorm) for m in algo.policy.model.modules()) == 2  # one per hidden layer
    assert algo.policy.epsilon == 1.0
    venv = make_vec("CartPole-v1", 4, manager="sync")
    try:
        policy = build("pqn.epsilon_decay_steps=100", act_space=venv.single_action_space,
                       obs_space=venv.single_observation_space, num_envs=4)
        collector = OnPolicyCollector(venv, policy.policy, num_steps=8)
        collector.reset(seed=0)
        rollout = collector.collect()  # a real rollout, as every backend hands it over
        assert np.isfinite(rollout["logp"]).all() and (rollout["logp"] <= 0).all()
        policy.learn(rollout)
        assert policy.env_steps == 32 and policy.policy.epsilon == pytest.approx(1.0 - 0.32 * 0.95)
        other = build("pqn.epsilon_decay_steps=100", act_space=venv.single_action_space,
                      obs_space=venv.single_observation_space, num_envs=4)
        other.load_state_dict(copy.deepcopy(policy.state_dict()))
        assert other.env_steps == 32 and other.policy.epsilon == policy.policy.epsilon
        rollout = collector.collect()
        for learner in (policy, other):  # the optimiser's state came along: the same steps (the same minibatches)
            torch.manual_seed(1)
            learner.learn(rollout)
        for a, b in zip(policy.policy.model.parameters(), other.policy.model.parameters()):
            torch.testing.assert_close(a, b)
    finally:
        venv.close()


def test_only_discrete_actions_and_many_envs():
    with pytest.raises(EnvError, match="PQN needs a Discrete action space.*got Box"):
        build(act_space=gym.spaces.Box(-1, 1, (2,), np.float32))
    with pytest.raises(EnvError, match="PQN needs a Discrete action space.*MultiDiscrete"):
        build(act_space=gym.spaces.MultiDiscrete([2, 3]))
    with pytest.raises(ConfigError, match="has 1 env: set env.num_envs=16"):
        build(num_envs=1)


@pytest.mark.parametrize("args, message", [
    (["--env", "Pendulum-v1"], "PQN needs a Discrete action space"),
    (["--env", "CartPole-v1", "--set", "env.num_envs=1"], "set env.num_envs=16"),
])
def test_the_cli_refuses_in_one_line_with_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    code = main(["train", "pqn", *args, "--total-steps", "64", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_trains_on_a_dict_env_through_its_encoders_and_the_loaded_policy_predicts_from_a_raw_dict(tmp_path):
    bandit = "relayrl.testing.envs:relayrl-test/DictBandit-v0"  # image uint8 + cue float32 + noise Discrete
    config = {"env": {"num_envs": 2, "manager": "sync"}, "pqn": {"num_steps": 16, "hidden_sizes": [16]},
              "eval": {"freq": 0, "episodes": 2, "num_envs": 2}, "threads": 1}
    run = relayrl.train("pqn", bandit, config, total_steps=128, seed=0, run_dir=tmp_path / "run", tensorboard=False)
    assert run.summary["updates"] > 0 and run.summary["last_eval_return"] is not None
    policy = relayrl.load(run.run_dir)
    assert isinstance(policy.model.encoder.encoder, DictEncoder)  # (inside OnPacked, which unpacks the rows)
    obs, _ = make(bandit, pack_dict=False).reset(seed=0)
    assert np.shape(policy.predict(obs)) == ()


def test_under_action_masks_the_returns_bootstrap_from_the_max_over_allowed_actions_only(monkeypatch):
    """Q(s, a) = 10 a everywhere (the output layer's bias alone), on an env that allows 2 of its 5 options each step
    and truncates its episodes at 10 steps: every next_value of a rollout, also at the truncations (the final
    observation's mask) and at the rollout's last observation, is the largest Q of an action allowed there, as
    DQN's target max (test_action_masks.py), never the 40 of an action the env forbids."""
    venv = make_vec("relayrl.testing.masked:relayrl-test/MaskedChoice-v0", 2, manager="sync")
    try:
        algo = build("pqn.hidden_sizes=[8]", act_space=venv.single_action_space,
                     obs_space=venv.single_observation_space, num_envs=2)
        with torch.no_grad():
            algo.policy.model.q[-1].weight.zero_()
            algo.policy.model.q[-1].bias.copy_(torch.arange(5.0) * 10)
        results = []
        step = venv.step
        monkeypatch.setattr(venv, "step", lambda action: results.append(step(action)) or results[-1])
        collector = OnPolicyCollector(venv, algo.policy, num_steps=16)
        collector.reset(seed=0)
        rollout = collector.collect()
    finally:
        venv.close()
    # the actions allowed at the observation that followed each step: the final one's where an episode ended
    allowed = np.stack([np.where((r.terminated | r.truncated)[:, None], r.final_action_mask, r.action_mask)
                        for r in results])
    expected = np.where(allowed, np.arange(5.0) * 10, -np.inf).max(-1)
    assert rollout["truncated"][9].all() and not allowed[[9, 15], :, 4].all()  # forbidden at a truncation or the end
    np.testing.assert_allclose(rollout["next_value"], expected)
    np.testing.assert_allclose(rollout["value"], np.where(rollout["action_mask"], np.arange(5.0) * 10, -np.inf).max(-1))
