"""PPO, APPO and A2C policies in a hybrid action space (relayrl/envs/hybrid.py): Tuple(Box, MultiDiscrete),
stored as one float32 row [C + B]; masks restrict the branches; predict returns (continuous, discrete);
the other algorithms refuse the space by name."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs.hybrid import hybrid_layout, hybrid_space
from relayrl.envs.masks import check_mask
from relayrl.errors import ConfigError, EnvError

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
SPACE = gym.spaces.Tuple((gym.spaces.Box(-0.5, 2.0, (2,), np.float32), gym.spaces.MultiDiscrete([3, 4], start=[1, 0])))
C, BRANCHES = 2, (3, 4)


def build(algo, *sets, space=SPACE):
    torch.manual_seed(0)
    config = build_config(algo, None, list(sets), {})
    return get_algo(algo).build_algorithm(config.algo_config, OBS, space, 4)


def test_the_space_and_its_layout():
    assert hybrid_space(2, (3,)) == gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32),
                                                      gym.spaces.MultiDiscrete([3])))
    layout = hybrid_layout(SPACE)
    assert (layout.continuous, layout.branches, layout.width) == (2, (3, 4), 4)
    rows = layout.join(np.array([[0.5, -1.0]]), np.array([[2, 3]]))
    assert rows.dtype == np.float32 and rows.tolist() == [[0.5, -1.0, 2.0, 3.0]]
    cont, disc = layout.split(rows)
    assert cont.dtype == np.float32 and disc.dtype == np.int64 and disc.tolist() == [[2, 3]]
    with pytest.raises(EnvError, match=r"shape \(1, 3\), expected \(n, 4\).*2 continuous values, then the indices"):
        layout.split(rows[:, :3])
    assert hybrid_layout(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))) is None
    # masks: one block per branch of the discrete part
    assert check_mask(np.ones((2, 7), bool), SPACE, "mask", rows=2).shape == (2, 7)
    with pytest.raises(EnvError, match="takes a mask of 7 booleans"):
        check_mask(np.ones((2, 9), bool), SPACE, "mask", rows=2)


@pytest.mark.parametrize("algo", ["ppo", "appo", "a2c"])
def test_actions_are_rows_of_continuous_values_then_allowed_branch_indices(algo):
    policy = build(algo).policy
    assert policy.action_shape == (C + len(BRANCHES),) and policy.action_dtype == np.float32
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (400, 3)).astype(np.float32)
    mask = np.ones((400, 7), bool)
    mask[:, 0] = mask[:, 2] = False  # branch 0: only index 1
    mask[::2, 3:6] = False  # branch 1, even rows: only index 3
    for mode in ("collect", "eval"):
        out = policy.act(obs, mode, action_mask=mask)
        assert out.action.shape == (400, 4) and out.action.dtype == np.float32
        assert (out.action[:, C] == 1).all() and (out.action[::2, C + 1] == 3).all()
        # the env's action: continuous clipped to the Box's bounds, indices shifted by the MultiDiscrete's start
        assert (out.env_action[:, :C] >= -0.5).all() and (out.env_action[:, :C] <= 2.0).all()
        np.testing.assert_array_equal(out.env_action[:, C:], out.action[:, C:] + [1, 0])
    out = policy.act(obs, "collect", action_mask=mask)
    assert (out.env_action[:, :C] != out.action[:, :C]).any()  # (a sample beyond the bounds was clipped)
    logits = policy.model.actor(torch.from_numpy(obs))
    logp, entropy = policy.logp_entropy(logits, torch.from_numpy(out.action), torch.from_numpy(mask))
    np.testing.assert_allclose(logp.detach().numpy(), out.logp, rtol=1e-5, atol=1e-5)
    assert policy.model.log_std.shape == (C,)
    with pytest.raises(EnvError, match=r"hybrid actions of shape \(400, 3\).*4 columns: 2 continuous values"):
        policy.logp_entropy(logits, torch.from_numpy(out.action[:, :3]))


def bandit_rollout(policy, rng, T=16, N=16):
    """A contextual bandit as a [T, N] rollout: reward -(c0 - 1)^2 for the first continuous value, +1 when
    branch 0 picks index 2 (env value 3)."""
    obs = rng.uniform(-1, 1, (T * N, 3)).astype(np.float32)
    out = policy.act(obs, "collect")
    reward = -(out.env_action[:, 0] - 1.0) ** 2 + (out.env_action[:, 2] == 3)
    shape = (T, N)
    return {"obs": out.obs.reshape(T, N, 3), "action": out.action.reshape(T, N, 4), "logp": out.logp.reshape(shape),
            "value": out.value.reshape(shape), "reward": reward.astype(np.float32).reshape(shape),
            "terminated": np.ones(shape, bool), "truncated": np.zeros(shape, bool),
            "next_value": np.zeros(shape, np.float32)}


@pytest.mark.parametrize("algo", ["ppo", "appo", "a2c"])
def test_learning_moves_both_parts_towards_the_reward(algo):
    """Gradients reach the Gaussian's means and the branches' logits: a bandit rewarding c0 near 1 and index 2
    of branch 0 (from 0.0 and 1/3 at the start)."""
    sets = ["a2c.lr=0.01"] if algo == "a2c" else [f"{algo}.actor_lr=0.01", f"{algo}.critic_lr=0.01",
                                                    f"{algo}.normalize_reward=false"]
    agent = build(algo, *sets)
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (256, 3)).astype(np.float32)

    def measure():  # the Gaussian's mean of c0, and how often branch 0 draws index 2
        means, samples = agent.policy.act(obs, "eval").env_action, agent.policy.act(obs, "collect").env_action
        return means[:, 0].mean(), (samples[:, 2] == 3).mean()

    c0, hit = measure()
    for i in range(20):  # (measured over seeds 0-2: c0 0.7 to 1.5, index 2 drawn > 99% of the time)
        metrics = agent.learn(bandit_rollout(agent.policy, rng), progress=i / 20)
        assert np.isfinite(metrics["loss/policy"]) and np.isfinite(metrics["loss/entropy"]), metrics
    c1, hit1 = measure()
    assert abs(c0) < 0.1 and c1 > 0.5, (c0, c1)
    assert hit < 0.5 and hit1 > 0.8, (hit, hit1)


def test_predict_returns_the_continuous_and_the_discrete_part():
    policy = build("ppo").policy
    obs = np.zeros(3, np.float32)
    cont, disc = policy.predict(obs, action_mask=np.array([True, False, False, True, True, True, True]))
    assert cont.shape == (2,) and cont.dtype == np.float32 and disc.shape == (2,) and disc.dtype == np.int64
    assert disc[0] == 1  # index 0 of a branch that starts at 1
    cont, disc = policy.predict(np.zeros((5, 3), np.float32))
    assert cont.shape == (5, 2) and disc.shape == (5, 2)
    with pytest.raises(EnvError, match="takes a mask of 7 booleans"):
        policy.predict(obs, action_mask=np.ones(4, bool))
    recurrent = build("ppo", "ppo.recurrent=gru", "ppo.recurrent_hidden=8").policy
    (cont, disc), state = recurrent.predict(np.zeros((5, 3), np.float32))
    assert cont.shape == (5, 2) and disc.shape == (5, 2) and state.shape == (5, recurrent.state_size)


@pytest.mark.parametrize("algo", ["sac", "td3", "dqn", "pqn", "redq", "crossq"])
def test_other_algorithms_refuse_hybrid_actions_by_name(algo):
    config = build_config(algo, None, [], {})
    with pytest.raises(EnvError, match=rf"^{algo} cannot act in the hybrid action space .*ppo, appo and a2c take"):
        get_algo(algo).build_policy(config.algo_config, OBS, hybrid_space(2, (3,)))


def test_mirror_is_refused_for_hybrid_actions():
    agent = build("ppo", "ppo.mirror=0.5")
    with pytest.raises(ConfigError, match="ppo.mirror"):
        agent.bind_env("Anything-v0")
