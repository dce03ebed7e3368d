"""IQL: the update's losses on a tiny batch, refusals, a checkpoint round trip, and that it beats BC on mixed data."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import default_config
from relayrl.data.datasets import check_dataset
from relayrl.errors import EnvError
from relayrl.io.checkpoint import load_checkpoint, save_checkpoint

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


@pytest.fixture(autouse=True)
def one_thread():  # as the Trainer runs small MLPs (threads: null); two threads on a loaded CPU are many times slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(name="iql", act_space=ACT, **options):
    torch.manual_seed(0)
    cfg = getattr(default_config(name), name).model_copy(update=options)
    return get_algo(name).build_algorithm(cfg, OBS, act_space, 1)


def best_action(obs):
    return np.tanh(2 * obs[:, :1] - obs[:, 1:])


def mixed_dataset(n=4096, rng=np.random.default_rng(0)):
    """One-step episodes (terminated), so Q is the reward: a third of the actions the best one, the rest uniform."""
    obs = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    action = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    good = rng.random(n) < 1 / 3
    action[good] = best_action(obs[good])
    reward = -((action - best_action(obs)) ** 2).sum(-1)
    return check_dataset({"obs": obs, "action": action, "reward": reward, "next_obs": obs,
                          "terminated": np.ones(n, bool)}, OBS, ACT, "test")


def batch(n=8, seed=1):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(n, 2)).astype(np.float32), "action": rng.uniform(-1, 1, (n, 1)).astype(np.float32),
            "reward": rng.normal(size=n).astype(np.float32), "next_obs": rng.normal(size=(n, 2)).astype(np.float32),
            "terminated": (rng.random(n) < 0.3).astype(np.float32)}


def test_the_losses_are_expectile_value_td_q_and_advantage_weighted_actor():
    algo = build(expectile=0.8, beta=2.0, gamma=0.9, reward_scale=0.5)
    b = batch()
    obs, action, next_obs = (torch.from_numpy(b[k]) for k in ("obs", "action", "next_obs"))
    with torch.no_grad():  # by hand, from the networks before the update
        target_q = torch.minimum(*algo.target(obs, action))
        v = algo.value(obs)[:, 0]
        u = target_q - v
        value_loss = (torch.where(u < 0, 0.2, 0.8) * u ** 2).mean()
        y = 0.5 * torch.from_numpy(b["reward"]) + 0.9 * (1 - torch.from_numpy(b["terminated"])) * algo.value(next_obs)[:, 0]
        q_loss = ((algo.critic(obs, action) - y) ** 2).mean()
        mean, std = algo.policy.actor(obs), algo.policy.actor.log_std.exp()
        logp = torch.distributions.Normal(mean, std).log_prob(action).sum(-1)
        actor_loss = -(torch.exp(2.0 * u).clamp(max=100) * logp).mean()
    metrics = algo.learn(b)
    assert metrics["loss/value"] == pytest.approx(value_loss.item(), rel=1e-5)
    assert metrics["loss/q"] == pytest.approx(q_loss.item(), rel=1e-5)
    assert metrics["loss/actor"] == pytest.approx(actor_loss.item(), rel=1e-5)
    assert algo.updates == 1 and algo.policy.version == 1


def test_iql_learns_the_best_actions_of_mixed_data_where_bc_learns_their_mean():
    data, rng = mixed_dataset(), np.random.default_rng(2)
    learners = {"bc": build("bc"), "iql": build(reward_scale=1.0)}  # (rewards of order 1 already)
    for _ in range(400):  # (seeds 0-3: IQL's error 0.08-0.11, a fifth to a quarter of BC's)
        rows = rng.integers(0, len(data["obs"]), 256)
        minibatch = {k: v[rows] for k, v in data.items()}
        for algo in learners.values():
            algo.learn(minibatch)
    obs = np.random.default_rng(3).uniform(-1, 1, (500, 2)).astype(np.float32)
    error = {name: np.abs(algo.policy.predict(obs) - best_action(obs)).mean() for name, algo in learners.items()}
    assert error["iql"] < 0.5 * error["bc"] and error["iql"] < 0.2, error


def test_a_checkpoint_round_trip_continues_exactly(tmp_path):
    a = build()
    a.learn(batch())
    save_checkpoint(tmp_path / "c", {"algo": a.state_dict()}, {})
    b = build(value_lr=0.5)  # (the optimiser state, its learning rates included, comes from the checkpoint)
    b.load_state_dict(load_checkpoint(tmp_path / "c").state["algo"])
    a.learn(batch(seed=2)), b.learn(batch(seed=2))
    obs = batch(seed=3)["obs"]
    np.testing.assert_allclose(a.policy.predict(obs), b.policy.predict(obs), rtol=1e-6)
    for x, y in zip(a.value.parameters(), b.value.parameters()):
        torch.testing.assert_close(x, y)


def test_export_graph_is_predict():
    policy = build().policy
    obs = batch()["obs"]
    with torch.no_grad():
        np.testing.assert_allclose(policy.export_graph().module(torch.from_numpy(obs)).numpy(), policy.predict(obs),
                                   rtol=1e-6)


def test_collect_mode_samples_around_the_mean_within_the_bounds():
    policy = build().policy
    obs = np.zeros((2000, 2), np.float32)
    sampled = policy.act(obs, "collect").action
    assert sampled.min() >= -1 and sampled.max() <= 1 and sampled.std() > 0.3  # log std starts at 0
    assert np.ptp(policy.act(obs, "eval").action) == 0


def test_iql_refuses_discrete_actions():
    with pytest.raises(EnvError, match="IQL learns continuous"):
        build(act_space=gym.spaces.Discrete(3))


@pytest.mark.parametrize("name", ["bc", "iql"])
def test_weights_and_checkpoints_are_cpu_tensors_wherever_the_learner_is(name):
    from relayrl.policy.device import resolve_device

    algo = build(name)
    algo.to(resolve_device("auto", algo.devices, name))  # CUDA where there is one
    algo.learn(batch())
    for tree in (algo.policy.get_weights(), algo.state_dict()):
        tensors = [v for v in _leaves(tree) if torch.is_tensor(v)]
        assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert algo.policy.act(batch()["obs"], "eval").action.shape == (8, 1)


def _leaves(tree):
    if isinstance(tree, dict):
        for value in tree.values():
            yield from _leaves(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _leaves(value)
    else:
        yield tree


def test_the_actors_learning_rate_follows_a_cosine_over_the_updates():
    algo = build(actor_lr=1e-3, critic_lr=2e-3)
    algo.set_progress(500, 1000)  # (the offline loop: updates done, total_steps)
    algo.learn(batch())
    assert algo.optim.param_groups[0]["lr"] == pytest.approx(0.5e-3)
    assert algo.optim.param_groups[1]["lr"] == 2e-3  # the critics' stays
    assert build(actor_cosine=False).optim.param_groups[0]["lr"] == 1e-3
