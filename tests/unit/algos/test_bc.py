"""Behaviour cloning: it imitates a fixed policy (Box and Discrete), honours masks, exports, and round-trips."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import default_config
from relayrl.data.datasets import check_dataset
from relayrl.errors import EnvError
from relayrl.io.checkpoint import load_checkpoint, save_checkpoint

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
W = np.array([[1.5, -0.5], [0.5, 1.0], [-1.0, 0.8]], np.float32)


def expert_box(obs):  # a fixed policy to imitate, in the env's bounds
    return np.clip(obs @ W, -2.0, 2.0)


def expert_discrete(obs):
    return (obs[:, 0] + 0.5 * obs[:, 1] > 0).astype(np.int64) + 2 * (obs[:, 2] > 0.5)


@pytest.fixture(autouse=True)
def one_thread():  # as the Trainer runs small MLPs (threads: null); two threads on a loaded CPU are many times slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(act_space, **options):
    torch.manual_seed(0)
    cfg = default_config("bc").bc.model_copy(update=options)
    return get_algo("bc").build_algorithm(cfg, OBS, act_space, 1)


def train(algo, data, updates, rng):
    for _ in range(updates):
        rows = rng.integers(0, len(data["obs"]), 256)
        metrics = algo.learn({k: v[rows] for k, v in data.items()})
    return metrics


def dataset(act_space, actions, n=4096, rng=np.random.default_rng(0)):
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    arrays = {"obs": obs, "action": actions(obs), "reward": np.zeros(n), "next_obs": obs,
              "terminated": np.zeros(n, bool)}
    return check_dataset(arrays, OBS, act_space, "test")


def test_bc_imitates_a_fixed_box_policy():
    algo = build(BOX)
    train(algo, dataset(BOX, expert_box), 300, np.random.default_rng(1))
    obs = np.random.default_rng(2).uniform(-1, 1, (500, 3)).astype(np.float32)
    error = np.abs(algo.policy.predict(obs) - expert_box(obs))
    assert error.mean() < 0.1, error.mean()  # actions span [-2, 2]


def test_bc_imitates_a_fixed_discrete_policy_and_honours_masks():
    space = gym.spaces.Discrete(4)
    algo = build(space)
    metrics = train(algo, dataset(space, expert_discrete), 300, np.random.default_rng(1))
    obs = np.random.default_rng(2).uniform(-1, 1, (500, 3)).astype(np.float32)
    assert (algo.policy.predict(obs) == expert_discrete(obs)).mean() > 0.9
    assert metrics["accuracy"] > 0.85
    mask = np.ones((500, 4), bool)
    mask[np.arange(500), expert_discrete(obs)] = False  # forbid what it would pick
    chosen = algo.policy.predict(obs, action_mask=mask)
    assert mask[np.arange(500), chosen].all()


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3, start=1)], ids=["box", "discrete"])
def test_export_graph_is_predict(space):
    algo = build(space)
    obs = np.random.default_rng(0).uniform(-1, 1, (7, 3)).astype(np.float32)
    graph = algo.policy.export_graph().module
    with torch.no_grad():
        exported = graph(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(exported, algo.policy.predict(obs), rtol=1e-5, atol=1e-6)


def test_a_checkpoint_round_trip_continues_exactly(tmp_path):
    data = dataset(BOX, expert_box)
    a = build(BOX)
    train(a, data, 5, np.random.default_rng(0))
    save_checkpoint(tmp_path / "c", {"algo": a.state_dict()}, {})
    b = build(BOX, lr=0.5)  # (the optimiser's state, learning rate included, comes from the checkpoint)
    b.load_state_dict(load_checkpoint(tmp_path / "c").state["algo"])
    batch = {k: v[:256] for k, v in data.items()}
    a.learn(batch), b.learn(batch)
    obs = data["obs"][:5]
    np.testing.assert_allclose(a.policy.predict(obs), b.policy.predict(obs), rtol=1e-6)
    assert a.updates == b.updates == 6


def test_bc_refuses_action_spaces_it_cannot_imitate():
    with pytest.raises(EnvError, match="Box or Discrete"):
        build(gym.spaces.MultiBinary(3))
    with pytest.raises(EnvError, match="must be finite"):
        build(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))


@pytest.mark.parametrize("name, act_space", [("bc", gym.spaces.Discrete(3)), ("iql", BOX)])
@pytest.mark.parametrize("obs_space", [gym.spaces.Box(0, 255, (36, 36, 2), np.uint8), gym.spaces.Discrete(5)],
                         ids=["image", "category"])
def test_offline_learners_read_images_and_categories_through_the_encoders(name, act_space, obs_space):
    torch.manual_seed(0)
    algo = get_algo(name).build_algorithm(getattr(default_config(name), name), obs_space, act_space, 1)
    obs_space.seed(0), act_space.seed(0)
    obs = np.stack([np.asarray(obs_space.sample(), obs_space.dtype) for _ in range(8)])
    actions = np.stack([np.asarray(act_space.sample()) for _ in range(8)])
    data = check_dataset({"obs": obs, "action": actions, "reward": np.ones(8), "next_obs": obs,
                          "terminated": np.zeros(8, bool)}, obs_space, act_space, "test")
    before = {k: v.clone() for k, v in algo.policy.get_weights()[next(iter(algo.policy.get_weights()))].items()}
    assert np.isfinite(list(algo.learn(data).values())).all()
    after = algo.policy.get_weights()[next(iter(algo.policy.get_weights()))]
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert algo.policy.predict(obs).shape == (8, *act_space.shape)
