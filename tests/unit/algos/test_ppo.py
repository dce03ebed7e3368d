import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos.ppo import PPO
from relayrl.config import build_config
from relayrl.errors import EnvError, NonFiniteError


def make_algo(*sets, obs_space=None, act_space=None, num_envs=4):
    cfg = build_config("ppo", None, list(sets)).ppo
    obs_space = obs_space or gym.spaces.Box(-1, 1, (3,), np.float32)
    act_space = act_space or gym.spaces.Discrete(2)
    return PPO(cfg, obs_space, act_space, num_envs)


def fake_rollout(T=8, N=4, obs_dim=3, actions=None, reward=1.0):
    rng = np.random.default_rng(0)
    return {
        "obs": rng.normal(size=(T, N, obs_dim)).astype(np.float32),
        "action": actions if actions is not None else rng.integers(0, 2, (T, N)),
        "logp": np.full((T, N), np.log(0.5), np.float32),
        "value": np.zeros((T, N), np.float32),
        "reward": np.full((T, N), reward, np.float32),
        "terminated": np.zeros((T, N), bool),
        "truncated": np.zeros((T, N), bool),
        "next_value": np.zeros((T, N), np.float32),
    }


def test_collect_mode_samples_and_eval_mode_is_deterministic():
    torch.manual_seed(0)
    algo = make_algo()
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    a1, a2 = algo.policy.act(obs, "eval"), algo.policy.act(obs, "eval")
    np.testing.assert_array_equal(a1.action, a2.action)
    assert a1.logp is None and a1.value is None
    c = algo.policy.act(obs, "collect")
    assert c.action.shape == (64,) and c.logp.shape == (64,) and c.value.shape == (64,)
    # an untrained policy is near uniform: sampling must produce both actions
    assert set(np.unique(c.action)) == {0, 1}
    np.testing.assert_allclose(c.logp, np.log(0.5), atol=0.05)


def test_continuous_actions_are_clipped_for_the_env_only():
    algo = make_algo("ppo.log_std_init=2.0", act_space=gym.spaces.Box(-0.5, 0.5, (2,), np.float32))
    out = algo.policy.act(np.zeros((256, 3), np.float32), "collect")
    assert out.action.shape == (256, 2) and np.abs(out.action).max() > 0.5
    assert np.abs(out.env_action).max() <= 0.5


def test_learn_moves_the_policy_toward_rewarded_actions():
    torch.manual_seed(0)
    algo = make_algo("ppo.epochs=20", "ppo.batch_size=32", "ppo.normalize_advantage=false")
    rollout = fake_rollout(actions=np.ones((8, 4), np.int64))
    # action 1 always gets reward 1 and the critic says 0: positive advantage for action 1
    obs = rollout["obs"].reshape(-1, 3)
    before = np.exp(algo.policy.model.logp_entropy(torch.from_numpy(obs), torch.ones(32))[0].detach().numpy())
    metrics = algo.learn(rollout)
    after = np.exp(algo.policy.model.logp_entropy(torch.from_numpy(obs), torch.ones(32))[0].detach().numpy())
    assert after.mean() > before.mean() + 0.05
    # the clipped surrogate stops pushing once the ratio passes 1 + clip (0.5 * 1.2 = 0.6)
    assert after.mean() < 0.5 * 1.2 + 0.05
    assert metrics["updates"] == 20 and np.isfinite(metrics["loss/value"])
    assert algo.policy.version == 1


def test_kl_early_stop_cuts_the_iteration_short():
    torch.manual_seed(0)
    algo = make_algo("ppo.epochs=50", "ppo.batch_size=8", "ppo.kl=0.001", "ppo.actor_lr=0.05")
    metrics = algo.learn(fake_rollout(actions=np.ones((8, 4), np.int64)))
    assert metrics["kl_stop"] == 1.0
    assert metrics["updates"] < 50 * 4


def test_learning_rate_annealing_follows_progress():
    algo = make_algo("ppo.actor_lr=0.01", "ppo.critic_lr=0.02", "ppo.anneal_lr=true")
    metrics = algo.learn(fake_rollout(), progress=0.75)
    assert metrics["lr/actor"] == pytest.approx(0.0025) and metrics["lr/critic"] == pytest.approx(0.005)
    assert algo.actor_optim.param_groups[0]["lr"] == pytest.approx(0.0025)


def test_non_finite_loss_raises_with_advice():
    algo = make_algo()
    with pytest.raises(NonFiniteError, match="lower the learning rates"):
        algo.learn(fake_rollout(reward=float("nan")))


def test_reward_normalisation_scales_by_return_std():
    algo = make_algo("ppo.normalize_reward=true", "ppo.gamma=0.0")
    rollout = fake_rollout()
    rollout["reward"] = np.random.default_rng(0).normal(3.0, 4.0, size=(8, 4)).astype(np.float32)
    # with gamma 0 the discounted return is the reward itself, so rewards end up with unit std
    scaled = algo.scale_rewards(rollout)
    assert np.std(scaled) == pytest.approx(1.0, abs=1e-3)
    np.testing.assert_allclose(scaled / rollout["reward"], scaled[0, 0] / rollout["reward"][0, 0], rtol=1e-5)
    plain = make_algo("ppo.reward_scale=0.5", "ppo.normalize_reward=false")
    np.testing.assert_allclose(plain.scale_rewards(fake_rollout(reward=10.0)), 5.0)


def test_state_dict_round_trip_restores_optimizer_and_normalizer():
    torch.manual_seed(0)
    algo = make_algo("ppo.obs_norm=true")
    algo.policy.act(np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32), "collect")
    algo.learn(fake_rollout())
    clone = make_algo("ppo.obs_norm=true")
    clone.load_state_dict(algo.state_dict())
    for a, b in zip(algo.policy.model.parameters(), clone.policy.model.parameters()):
        assert torch.equal(a, b)
    np.testing.assert_array_equal(clone.policy.obs_rms.mean, algo.policy.obs_rms.mean)
    sa, sb = algo.actor_optim.state_dict()["state"], clone.actor_optim.state_dict()["state"]
    assert torch.equal(sa[0]["exp_avg"], sb[0]["exp_avg"])
    assert clone.policy.version == algo.policy.version


def test_unsupported_spaces_are_refused_clearly():
    with pytest.raises(EnvError, match="Discrete, MultiDiscrete .* and Box action spaces"):
        make_algo(act_space=gym.spaces.MultiBinary(3))
    with pytest.raises(EnvError, match="cannot be read by ppo's networks as it is"):  # unpacked (test_dict_obs.py)
        make_algo(obs_space=gym.spaces.Dict({"a": gym.spaces.Discrete(4)}))
