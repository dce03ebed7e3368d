"""A2C (relayrl/algos/a2c.py): SB3's update on a tiny rollout, checkpoints, recurrent learning, refusals."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from relayrl.algos import get_algo
from relayrl.algos.a2c import A2C
from relayrl.algos.ppo import PPOPolicy
from relayrl.cli import main
from relayrl.config import build_config
from relayrl.errors import ConfigError

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)


def build(*sets, act_space=gym.spaces.Discrete(2), num_envs=2) -> A2C:
    torch.manual_seed(0)
    cfg = build_config("a2c", None, list(sets)).a2c
    return get_algo("a2c").build_algorithm(cfg, OBS, act_space, num_envs)


def rollout_of(algo: A2C, T=3, N=2, seed=0, done_at=None) -> dict:
    """A [T, N] rollout with the policy's own values; episode ends where ``done_at`` says (t, n, terminated)."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (T, N, 3)).astype(np.float32)
    value = algo.policy.value(obs.reshape(T * N, 3)).reshape(T, N)
    last = rng.normal(size=N).astype(np.float32)
    rollout = {"obs": obs, "action": rng.integers(0, 2, (T, N)).astype(np.int64), "logp": np.zeros((T, N), np.float32),
               "value": value, "reward": rng.normal(size=(T, N)).astype(np.float32),
               "terminated": np.zeros((T, N), bool), "truncated": np.zeros((T, N), bool),
               "next_value": np.concatenate([value[1:], last[None]])}
    if done_at is not None:
        t, n, terminated = done_at
        rollout["terminated" if terminated else "truncated"][t, n] = True
    if algo.policy.recurrent:
        rollout["hidden"] = np.zeros((T, N, algo.policy.state_size), np.float32)
    return rollout


def test_one_learn_is_sb3s_a2c_step_n_step_returns_one_rmsprop_step_on_one_loss():
    algo = build("a2c.gamma=0.9", "a2c.entropy_coef=0.01")
    rollout = rollout_of(algo, done_at=(0, 1, True))
    model = copy.deepcopy(algo.policy.model)
    # by hand: lambda 1 gives the n-step returns, cut where env 1 terminated at t=0
    r, v, nv, gamma = rollout["reward"], rollout["value"], rollout["next_value"], 0.9
    returns = np.zeros_like(r)
    returns[2] = r[2] + gamma * nv[2]
    returns[1] = r[1] + gamma * returns[2]
    returns[0, 0] = r[0, 0] + gamma * returns[1, 0]
    returns[0, 1] = r[0, 1]  # terminal: nothing after
    obs, actions = torch.from_numpy(rollout["obs"].reshape(6, 3)), torch.from_numpy(rollout["action"].reshape(6))
    logits, values = model.actor(obs), model.critic(obs).squeeze(-1)
    logp = torch.log_softmax(logits, -1).gather(-1, actions[:, None]).squeeze(-1)
    entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    ret = torch.from_numpy(returns.reshape(6))
    advantage = ret - torch.from_numpy(v.reshape(6))
    loss = -(advantage * logp).mean() - 0.01 * entropy.mean() + 0.5 * F.mse_loss(values, ret)
    optim = torch.optim.RMSprop(model.parameters(), lr=7e-4, alpha=0.99, eps=1e-5)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optim.step()

    metrics = algo.learn(rollout)
    assert metrics["updates"] == 1 and algo.policy.version == 1
    np.testing.assert_allclose(metrics["loss/policy"], -(advantage * logp).mean().item(), rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/value"], F.mse_loss(values, ret).item(), rtol=1e-5)
    for (name, mine), theirs in zip(algo.policy.model.named_parameters(), model.parameters()):
        torch.testing.assert_close(mine, theirs, msg=name)
    fresh = build().policy.model  # (the step moved the parameters: the comparison above is of a real step)
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))


def test_checkpoint_round_trip_continues_the_same_run():
    first = build()
    first.learn(rollout_of(first, seed=1))
    second = build("seed=3")
    with torch.no_grad():
        for p in second.policy.model.parameters():
            p.add_(1.0)
    second.load_state_dict(copy.deepcopy(first.state_dict()))  # (as a checkpoint file holds it: no shared tensors)
    assert second.policy.version == first.policy.version == 1
    rollout = rollout_of(first, seed=2)
    first.learn(rollout)
    second.learn(rollout)  # the optimiser's state came along: the same step
    for a, b in zip(first.policy.model.parameters(), second.policy.model.parameters()):
        torch.testing.assert_close(a, b)


def test_recurrent_policies_learn_from_the_whole_trajectories():
    algo = build("a2c.recurrent=lstm", "a2c.recurrent_hidden=8", "a2c.hidden_sizes=[8]")
    assert algo.policy.recurrent and isinstance(algo.policy, PPOPolicy)
    before = [p.detach().clone() for p in algo.policy.model.parameters()]
    metrics = algo.learn(rollout_of(algo, T=5, N=3, done_at=(2, 0, False)))
    assert np.isfinite(metrics["loss/value"]) and metrics["updates"] == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.policy.model.parameters()))


def test_continuous_actions_and_update_norm_without_statistics():
    algo = build(act_space=gym.spaces.Box(-1, 1, (2,), np.float32))
    rollout = rollout_of(algo)
    rollout["action"] = np.zeros((3, 2, 2), np.float32)
    assert np.isfinite(algo.learn(rollout)["loss/policy"])
    with pytest.raises(ConfigError, match="a2c.update_norm=true has no effect with a2c.obs_norm=false"):
        build_config("a2c", None, ["a2c.update_norm=true"]).a2c.check("a2c")


def test_defaults_are_sb3s(capsys):
    cfg = build_config("a2c").a2c
    assert (cfg.num_steps, cfg.lr, cfg.rms_alpha, cfg.rms_eps, cfg.gae_lambda, cfg.vf_coef, cfg.grad_clip,
            cfg.entropy_coef) == (5, 7e-4, 0.99, 1e-5, 1.0, 0.5, 0.5, 0.0)
    assert main(["config", "a2c"]) == 0
    assert "RMSprop smoothing constant" in capsys.readouterr().out  # every field documented
