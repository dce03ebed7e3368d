"""relayrl.policy.recurrent and PPOPolicy's hidden states: steps equal sequences, padding is inert,
states per env and per mode, resets."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos.ppo import PPOPolicy
from relayrl.config import build_config
from relayrl.policy.recurrent import RecurrentActorCritic

CASES = [("lstm", False), ("lstm", True), ("gru", False), ("gru", True)]


def make_model(kind, shared, obs_dim=3, act_dim=2):
    torch.manual_seed(0)
    return RecurrentActorCritic(obs_dim, act_dim, False, kind, hidden=8, shared_trunk=shared, head_sizes=[8])


@pytest.mark.parametrize("kind, shared", CASES)
def test_one_step_at_a_time_equals_the_whole_sequence(kind, shared):
    model = make_model(kind, shared)
    assert model.state_size == 8 * (2 if kind == "lstm" else 1) * (1 if shared else 2)
    obs = torch.randn(4, 7, 3)
    state0 = torch.randn(4, model.state_size) * 0.5
    with torch.no_grad():
        out, value, last = model(obs, state0)
        state, outs, values = state0, [], []
        for t in range(7):
            o, v, state = model(obs[:, t:t + 1], state)
            outs.append(o)
            values.append(v)
    assert out.shape == (4, 7, 2) and value.shape == (4, 7)
    torch.testing.assert_close(torch.cat(outs, 1), out)
    torch.testing.assert_close(torch.cat(values, 1), value)
    torch.testing.assert_close(state, last)


@pytest.mark.parametrize("kind, shared", CASES)
def test_padding_after_a_sequence_changes_none_of_its_outputs_or_gradients(kind, shared):
    model = make_model(kind, shared)
    obs = torch.randn(1, 4, 3)
    padded = torch.cat([obs, torch.full((1, 3, 3), 1e6)], dim=1)
    state0 = torch.zeros(1, model.state_size)

    def run(x):
        model.zero_grad()
        out, value, _ = model(x, state0)
        loss = out[:, :4].pow(2).sum() + value[:, :4].pow(2).sum()
        loss.backward()
        return out[:, :4].detach(), value[:, :4].detach(), [p.grad.clone() for p in model.parameters()
                                                              if p.grad is not None]

    plain, with_padding = run(obs), run(padded)
    for a, b in zip(plain[:2], with_padding[:2]):
        torch.testing.assert_close(a, b)
    assert len(plain[2]) == len(with_padding[2])
    for a, b in zip(plain[2], with_padding[2]):
        torch.testing.assert_close(a, b)


def test_without_the_critic_the_critic_state_is_left_alone():
    model = make_model("lstm", False)
    state = torch.randn(2, model.state_size)
    with torch.no_grad():
        out, value, after = model(torch.randn(2, 1, 3), state, critic=False)
    assert value is None
    assert torch.equal(after[:, model.layer_size:], state[:, model.layer_size:])
    assert not torch.equal(after[:, :model.layer_size], state[:, :model.layer_size])


def test_actor_and_critic_parameters_split_the_model():
    for shared in (False, True):
        model = make_model("gru", shared)
        actor, critic = model.actor_parameters(), model.critic_parameters()
        ids = {id(p) for p in actor} | {id(p) for p in critic}
        assert len(ids) == len(actor) + len(critic) == len(list(model.parameters()))


def make_policy(*sets, obs_dim=3):
    cfg = build_config("ppo", None, ["ppo.recurrent=gru", "ppo.recurrent_hidden=8", *sets]).ppo
    torch.manual_seed(0)
    return PPOPolicy(gym.spaces.Box(-1, 1, (obs_dim,), np.float32), gym.spaces.Discrete(2), cfg)


def test_policy_keeps_a_state_per_env_and_per_mode_and_resets_rows():
    policy = make_policy()
    assert policy.recurrent and policy.state_size == 16
    obs = np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32)
    assert not policy.hidden("collect", 3).any()
    policy.act(obs, "collect")
    policy.act(obs, "collect")
    collect = policy.hidden("collect", 3).clone()
    assert (collect.abs().sum(1) > 0).all()
    # evaluation has its own states: it does not disturb the episodes being collected
    policy.act(obs[:2], "eval")
    assert torch.equal(policy.hidden("collect", 3), collect)
    assert policy.hidden("eval", 2).abs().sum() > 0
    # a value is a peek: the state is not advanced
    v_all = policy.value(obs)
    v_rows = policy.value(obs[[0, 2]], np.array([True, False, True]))
    np.testing.assert_allclose(v_rows, v_all[[0, 2]], rtol=1e-6)
    assert torch.equal(policy.hidden("collect", 3), collect)
    # an episode that ends zeroes its env's state only
    policy.reset_hidden("collect", np.array([False, True, False]))
    after = policy.hidden("collect", 3)
    assert not after[1].any() and torch.equal(after[[0, 2]], collect[[0, 2]])
    policy.reset_hidden("collect")
    assert not policy.hidden("collect", 3).any()


def test_the_first_step_of_an_episode_acts_like_a_fresh_policy():
    policy = make_policy()
    obs = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    first = policy.act(obs, "eval").action
    for _ in range(3):
        policy.act(obs[::-1].copy(), "eval")
    policy.reset_hidden("eval", np.array([True, True]))
    np.testing.assert_array_equal(policy.act(obs, "eval").action, first)
    fresh = policy.model(torch.from_numpy(obs)[:, None], policy.model.initial_state(2), critic=False)[2]
    torch.testing.assert_close(fresh, policy.hidden("eval", 2))  # eval mode runs the actor only
