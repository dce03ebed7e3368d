import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos.dqn import DQN
from relayrl.config import build_config
from relayrl.errors import EnvError

OBS = gym.spaces.Box(-5, 5, (4,), np.float32)


def make(*sets):
    torch.manual_seed(0)
    return DQN(build_config("dqn", None, list(sets)).dqn, OBS, gym.spaces.Discrete(2), 1)


def chain_batch(rng, pool, terminated=0.0, n=64):
    idx = rng.integers(0, len(pool) - 1, n)
    return {"obs": pool[idx], "action": rng.integers(0, 2, n), "reward": np.ones(n, np.float32),
            "next_obs": pool[idx + 1], "terminated": rng.random(n) < terminated,
            "discount": np.full(n, 0.9, np.float32), "weight": np.ones(n, np.float32)}


@pytest.mark.parametrize("sets", [[], ["dqn.double=false"], ["dqn.dueling=true"], ["dqn.tau=0.05"]])
def test_q_values_converge_to_the_discounted_return(sets):
    algo = make("dqn.target_update_period=10", "dqn.lr=1e-3", *sets)
    rng = np.random.default_rng(0)
    pool = rng.normal(size=(500, 4)).astype(np.float32)
    for _ in range(1200):
        metrics = algo.learn(chain_batch(rng, pool))
    assert metrics["q_mean"] == pytest.approx(1 / (1 - 0.9), rel=0.1)  # r = 1 forever, γ = 0.9


def test_terminal_transitions_do_not_bootstrap():
    algo = make("dqn.target_update_period=10", "dqn.lr=1e-3")
    rng = np.random.default_rng(0)
    pool = rng.normal(size=(500, 4)).astype(np.float32)
    for _ in range(1500):
        metrics = algo.learn(chain_batch(rng, pool, terminated=1.0))
    assert metrics["q_mean"] == pytest.approx(1.0, rel=0.1)


def test_priorities_are_td_errors_and_weights_scale_the_loss():
    algo = make()
    rng = np.random.default_rng(0)
    pool = rng.normal(size=(100, 4)).astype(np.float32)
    batch = chain_batch(rng, pool)
    algo.learn(batch)
    priorities = algo.pop_priorities()
    assert priorities.shape == (64,) and (priorities >= 0).all()
    fresh = make()  # no Adam momentum yet: a zero-weight batch must not move the network
    zero = chain_batch(rng, pool)
    zero["weight"][:] = 0.0
    before = [p.clone() for p in fresh.policy.model.parameters()]
    fresh.learn(zero)
    assert all(torch.equal(a, b) for a, b in zip(before, fresh.policy.model.parameters()))


def test_epsilon_greedy_in_collect_and_greedy_in_eval():
    algo = make("dqn.epsilon_decay_steps=100")
    obs = np.zeros((1000, 4), np.float32)
    greedy = algo.policy.act(obs, "eval").action
    assert len(set(greedy.tolist())) == 1
    explored = algo.policy.act(obs, "collect").action  # epsilon 1 at the start: uniform
    assert 0.4 < explored.mean() < 0.6
    algo.set_progress(50, 10_000)
    assert algo.policy.epsilon == pytest.approx(1.0 + 0.5 * (0.04 - 1.0))
    algo.set_progress(10_000, 10_000)
    assert algo.policy.epsilon == pytest.approx(0.04)


def test_continuous_actions_are_refused():
    with pytest.raises(EnvError, match="Discrete"):
        DQN(build_config("dqn").dqn, OBS, gym.spaces.Box(-1, 1, (2,)), 1)


def test_state_dict_round_trip():
    algo = make()
    rng = np.random.default_rng(0)
    pool = rng.normal(size=(100, 4)).astype(np.float32)
    for _ in range(5):
        algo.learn(chain_batch(rng, pool))
    clone = make()
    clone.load_state_dict(algo.state_dict())
    obs = rng.normal(size=(10, 4)).astype(np.float32)
    np.testing.assert_array_equal(algo.policy.act(obs, "eval").action, clone.policy.act(obs, "eval").action)
    assert clone.updates == 5
