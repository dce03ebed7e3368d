"""PPO, APPO and DQN policies under action masks: forbidden actions are never sampled nor chosen, the
stored log-probability is the masked distribution's, DQN's target maxes over allowed actions only, and
MultiDiscrete actions have one head per branch."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs.masks import ActionMaskError

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def random_masks(rng, n, branches, allowed=2):
    blocks = []
    for size in branches:
        keys = rng.random((n, size))
        blocks.append(keys <= np.sort(keys, axis=1)[:, allowed - 1:allowed])
    return np.concatenate(blocks, axis=1)


def allowed(actions, mask, branches):
    actions = np.asarray(actions).reshape(len(mask), len(branches))
    starts = np.cumsum((0, *branches[:-1]))
    return mask[np.arange(len(mask))[:, None], starts + actions].all()


def build(algo, act_space, *sets):
    config = build_config(algo, None, list(sets), {})
    entry = get_algo(algo)
    return entry.algo_cls(config.algo_config, OBS, act_space, 4)


@pytest.mark.parametrize("algo", ["ppo", "appo", "dqn", "a2c", "pqn"])
@pytest.mark.parametrize("act_space", [gym.spaces.Discrete(6), gym.spaces.MultiDiscrete([3, 4])],
                         ids=["discrete", "multidiscrete"])
def test_forbidden_actions_are_never_sampled_nor_chosen(algo, act_space):
    if algo == "pqn" and isinstance(act_space, gym.spaces.MultiDiscrete):
        pytest.skip("pqn acts in Discrete spaces only (test_pqn.py checks the refusal)")
    torch.manual_seed(0)
    agent = build(algo, act_space)
    policy = agent.policy
    policy.set_progress(0, 1)  # DQN, PQN: epsilon 1, every action a random one
    branches = tuple(int(n) for n in np.atleast_1d(act_space.nvec if hasattr(act_space, "nvec") else act_space.n))
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (500, 3)).astype(np.float32)
    mask = random_masks(rng, len(obs), branches)
    for mode in ("collect", "eval"):
        out = policy.act(obs, mode, action_mask=mask)
        assert out.action.shape == (len(obs), *act_space.shape)
        assert allowed(out.action, mask, branches), mode
    if algo not in ("dqn", "pqn"):  # the stored logp is the masked distribution's, as the loss computes it
        out = policy.act(obs, "collect", action_mask=mask)
        logits = policy.model.actor(torch.from_numpy(obs))
        logp, entropy = policy.logp_entropy(logits, torch.from_numpy(out.action), torch.from_numpy(mask))
        np.testing.assert_allclose(logp.detach().numpy(), out.logp, rtol=1e-5, atol=1e-5)
        assert torch.isfinite(entropy).all() and (entropy <= len(branches) * np.log(2) + 1e-4).all()


@pytest.mark.parametrize("algo", ["ppo", "dqn", "pqn"])
def test_predict_takes_a_mask_for_one_observation_or_a_batch(algo):
    policy = build(algo, gym.spaces.Discrete(4)).policy
    only = np.array([False, False, True, False])
    assert policy.predict(np.zeros(3, np.float32), action_mask=only) == 2
    batch = policy.predict(np.zeros((2, 3), np.float32), action_mask=[[1, 0, 0, 0], [0, 0, 0, 1]])
    assert batch.tolist() == [0, 3]
    with pytest.raises(ActionMaskError, match=r"shape \(1, 3\).*Discrete\(4\) takes a mask of 4 booleans"):
        policy.predict(np.zeros(3, np.float32), action_mask=[True, True, False])


def test_predict_takes_the_mask_entry_of_a_dict_observation():
    """PettingZoo classic's {"observation", "action_mask"}, as the env gives it: the mask is the entry (an
    explicit action_mask wins), the observation the entry left."""
    policy = build("ppo", gym.spaces.Discrete(4)).policy
    obs = np.zeros(3, np.float32)
    for only in range(4):
        mask = np.arange(4) == only
        assert policy.predict({"observation": obs, "action_mask": mask.astype(np.int8)}) == only
        assert policy.predict({"observation": obs, "action_mask": mask}, action_mask=np.roll(mask, 1)) == (only + 1) % 4
    batch = {"observation": np.zeros((2, 3), np.float32), "action_mask": np.array([[1, 0, 0, 0], [0, 0, 1, 0]])}
    assert policy.predict(batch).tolist() == [0, 2]


def test_dqn_targets_max_over_the_next_allowed_actions_only():
    agent = build("dqn", gym.spaces.Discrete(2), "dqn.double=false", "dqn.hidden_sizes=[8]")
    with torch.no_grad():  # the target network says Q(., 1) = 100, Q(., 0) = 0 everywhere
        last = agent.target.q[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.0, 100.0]))
    n = 4
    batch = {"obs": np.zeros((n, 3), np.float32), "action": np.zeros(n, np.int64),
             "reward": np.zeros(n, np.float32), "next_obs": np.zeros((n, 3), np.float32),
             "terminated": np.zeros(n, bool), "discount": np.ones(n, np.float32)}
    with torch.no_grad():
        q = agent.policy.model(torch.zeros(n, 3))[:, 0].numpy()
    unmasked = dict(batch)
    agent.learn(unmasked)
    np.testing.assert_allclose(agent.pop_priorities(), np.abs(q - 100.0), rtol=1e-4)
    agent = build("dqn", gym.spaces.Discrete(2), "dqn.double=false", "dqn.hidden_sizes=[8]")
    with torch.no_grad():
        agent.target.q[-1].weight.zero_()
        agent.target.q[-1].bias.copy_(torch.tensor([0.0, 100.0]))
        q = agent.policy.model(torch.zeros(n, 3))[:, 0].numpy()
    masked = {**batch, "next_action_mask": np.tile([True, False], (n, 1))}
    agent.learn(masked)
    np.testing.assert_allclose(agent.pop_priorities(), np.abs(q), rtol=1e-4, atol=1e-6)


def test_a_policy_that_cannot_mask_refuses_a_masking_env():
    from relayrl.core import Policy
    from relayrl.errors import EnvError
    from relayrl.types import PolicyOutput

    class Plain(Policy):
        def act(self, obs, mode="collect"):
            return PolicyOutput(action=np.zeros(len(obs), np.int64), env_action=np.zeros(len(obs), np.int64))

        def get_weights(self):
            return {}

        def set_weights(self, weights, version=None):
            pass

    obs = np.zeros((2, 3), np.float32)
    assert Plain().act_masked(obs, "eval", np.ones((2, 3), bool)).action.tolist() == [0, 0]  # nothing forbidden
    with pytest.raises(EnvError, match="cannot honour them"):
        Plain().act_masked(obs, "eval", np.array([[True, False, True]] * 2))
