import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from relayrl.algos.sac import SAC, TwinQ
from relayrl.config import build_config
from relayrl.errors import EnvError

OBS = gym.spaces.Box(-5, 5, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def make(*sets):
    torch.manual_seed(0)
    return SAC(build_config("sac", None, list(sets)).sac, OBS, ACT, 1)


def test_twin_critic_is_two_independent_mlps():
    torch.manual_seed(0)
    net = TwinQ(5, [16, 16])
    obs, act = torch.randn(7, 3), torch.randn(7, 2)
    q = net(obs, act)
    x = torch.cat([obs, act], -1)
    for k in range(2):
        h = x
        for i, (w, b) in enumerate(zip(net.weights, net.biases)):
            h = h @ w[k] + b[k]
            if i < len(net.weights) - 1:
                h = torch.relu(h)
        torch.testing.assert_close(q[k], h.squeeze(-1))
    assert not torch.equal(q[0], q[1])  # separately initialised


def test_squashed_log_probability_matches_torch_distributions():
    algo = make()
    obs = torch.randn(64, 3)
    torch.manual_seed(1)
    action, logp = algo.policy.actor.sample(obs)
    mean, log_std = algo.policy.actor(obs)
    dist = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform(cache_size=1)])
    reference = dist.log_prob(action.clamp(-1 + 1e-6, 1 - 1e-6)).sum(-1)
    torch.testing.assert_close(logp, reference, atol=2e-3, rtol=1e-3)


def test_actions_are_scaled_into_the_bounds_and_eval_is_deterministic():
    algo = make("sac.start_training=0")
    obs = np.random.default_rng(0).normal(size=(500, 3)).astype(np.float32)
    out = algo.policy.act(obs, "collect")
    assert out.action.min() >= -1 and out.action.max() <= 1
    assert (out.env_action >= ACT.low).all() and (out.env_action <= ACT.high).all()
    np.testing.assert_allclose(out.env_action, ACT.low + (out.action + 1) * (ACT.high - ACT.low) / 2, rtol=1e-6)
    np.testing.assert_array_equal(algo.policy.act(obs, "eval").action, algo.policy.act(obs, "eval").action)


def test_random_actions_until_training_starts():
    algo = make("sac.start_training=100")
    algo.set_progress(0, 1000)
    assert algo.policy.random_actions
    algo.set_progress(100, 1000)
    assert not algo.policy.random_actions


def test_learn_updates_critics_actor_and_temperature():
    algo = make()
    rng = np.random.default_rng(0)
    n = 32
    batch = {"obs": rng.normal(size=(n, 3)).astype(np.float32), "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
             "reward": np.ones(n, np.float32), "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
             "terminated": np.zeros(n, bool), "discount": np.full(n, 0.99, np.float32)}
    target_before = [p.clone() for p in algo.target.parameters()]
    alpha_before = algo.log_alpha.item()
    metrics = algo.learn(dict(batch))
    assert all(np.isfinite(v) for v in metrics.values())
    assert algo.log_alpha.item() != alpha_before
    moved = [not torch.equal(a, b) for a, b in zip(target_before, algo.target.parameters())]
    assert all(moved)  # soft update touched every target parameter
    fixed = make("sac.autotune=false", "sac.init_alpha=0.2")
    fixed.learn(dict(batch))
    assert fixed.log_alpha.exp().item() == pytest.approx(0.2)


def test_discrete_actions_and_unbounded_boxes_are_refused():
    cfg = build_config("sac").sac
    with pytest.raises(EnvError, match="continuous"):
        SAC(cfg, OBS, gym.spaces.Discrete(3), 1)
    with pytest.raises(EnvError, match="finite"):
        SAC(cfg, OBS, gym.spaces.Box(-np.inf, np.inf, (2,)), 1)


def test_state_dict_round_trip():
    algo = make("sac.start_training=0")
    clone = make("sac.start_training=0")
    clone.load_state_dict(algo.state_dict())
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_array_equal(algo.policy.act(obs, "eval").action, clone.policy.act(obs, "eval").action)
    assert clone.log_alpha.item() == algo.log_alpha.item()


def test_a_checkpoint_with_three_optimisers_resumes_into_the_one_optimiser():
    """Checkpoints written before 2026-11-25 hold an Adam each for the actor, the critics and the
    temperature: their moments must land on the same parameters of today's single optimiser."""
    old = make("sac.start_training=0")
    actor, critic = list(old.policy.actor.parameters()), list(old.critic.parameters())
    optims = {"actor_optim": torch.optim.Adam(actor, lr=1e-3, fused=True),
              "critic_optim": torch.optim.Adam(critic, lr=2e-3, fused=True),
              "alpha_optim": torch.optim.Adam([old.log_alpha], lr=3e-3)}
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        for p in [*actor, *critic, old.log_alpha]:
            p.grad = torch.randn(p.shape, generator=generator)
        for optim in optims.values():
            optim.step()
    state = old.state_dict()
    del state["optim"]
    state.update({k: o.state_dict() for k, o in optims.items()})
    resumed = make("sac.start_training=0")
    resumed.load_state_dict(state)
    mine = [*resumed.policy.actor.parameters(), *resumed.critic.parameters(), resumed.log_alpha]
    theirs = [(p, optims["actor_optim"]) for p in actor] + [(p, optims["critic_optim"]) for p in critic] \
        + [(old.log_alpha, optims["alpha_optim"])]
    for p, (q, optim) in zip(mine, theirs, strict=True):
        torch.testing.assert_close(resumed.optim.state[p]["exp_avg"], optim.state[q]["exp_avg"])
        torch.testing.assert_close(resumed.optim.state[p]["exp_avg_sq"], optim.state[q]["exp_avg_sq"])
    assert [g["lr"] for g in resumed.optim.param_groups] == [1e-3, 2e-3, 3e-3]
    assert all(g["fused"] for g in resumed.optim.param_groups)
    resumed.learn({"obs": np.zeros((4, 3), np.float32), "action": np.zeros((4, 2), np.float32),
                   "reward": np.ones(4, np.float32), "next_obs": np.zeros((4, 3), np.float32),
                   "terminated": np.zeros(4, bool), "discount": np.full(4, 0.99, np.float32)})
