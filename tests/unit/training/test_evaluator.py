"""relayrl.training.evaluator: deterministic evaluation with episodes balanced across envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from relayrl.envs.vector import SyncVectorEnv, VectorEnv
from relayrl.training.evaluator import EvalResult, Evaluator
from relayrl.core import Policy
from relayrl.types import PolicyOutput, StepResult


class FakeVectorEnv(VectorEnv):
    """Env k has episodes of exactly k + 1 steps and reward k + 1 per step (return (k + 1) ** 2)."""

    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.reset_seeds = []
        self.steps = 0

    def reset(self, seed=None):
        self.reset_seeds.append(seed)
        self.t[:] = 0
        return np.zeros((self.num_envs, 1), np.float32)

    def step(self, actions):
        assert np.asarray(actions).shape == (self.num_envs,)
        self.steps += 1
        self.t += 1
        lengths = np.arange(1, self.num_envs + 1)
        done = self.t >= lengths
        final = self.t[:, None].astype(np.float32)
        self.t[done] = 0
        return StepResult(obs=self.t[:, None].astype(np.float32), reward=lengths.astype(np.float32),
                          terminated=done.copy(), truncated=np.zeros(self.num_envs, bool), final_obs=final,
                          env_ids=np.arange(self.num_envs))


class FakePolicy(Policy):
    def __init__(self):
        self.modes = []

    def act(self, obs, mode):
        self.modes.append(mode)
        action = np.zeros(len(obs), np.int64)
        return PolicyOutput(action=action, env_action=action)

    def get_weights(self):
        return {}

    def set_weights(self, weights, version=None):
        pass


def expected_quota(episodes, n):
    return [episodes // n + (1 if k < episodes % n else 0) for k in range(n)]


@pytest.mark.parametrize("n, episodes", [(3, 7), (4, 4), (4, 2), (3, 10), (1, 3), (5, 12)])
def test_each_env_contributes_exactly_its_quota(n, episodes):
    venv, policy = FakeVectorEnv(n), FakePolicy()
    result = Evaluator(venv, episodes=episodes, seed=0).evaluate(policy)
    assert isinstance(result, EvalResult)
    assert len(result.returns) == len(result.lengths) == episodes
    quota = expected_quota(episodes, n)
    # an episode of length k + 1 comes from env k
    counts = [int(np.sum(result.lengths == k + 1)) for k in range(n)]
    assert counts == quota
    np.testing.assert_array_equal(result.returns, result.lengths.astype(float) ** 2)
    hand_mean = sum(q * (k + 1) ** 2 for k, q in enumerate(quota)) / episodes
    assert result.mean == pytest.approx(hand_mean)
    hand_std = np.std(np.repeat([(k + 1) ** 2 for k in range(n)], quota))
    assert result.std == pytest.approx(hand_std)
    assert set(policy.modes) == {"eval"}
    # stops as soon as the slowest env with a quota has finished: no wasted steps
    assert venv.steps == max(q * (k + 1) for k, q in enumerate(quota))


def test_hand_computed_mean_3_envs_7_episodes():
    # quotas 3, 2, 2 -> returns 1, 1, 1, 4, 4, 9, 9 -> mean 29 / 7 (a first-come count would favour env 0)
    result = Evaluator(FakeVectorEnv(3), episodes=7, seed=0).evaluate(FakePolicy())
    assert sorted(result.returns.tolist()) == [1, 1, 1, 4, 4, 9, 9]
    assert result.mean == pytest.approx(29 / 7)


def test_reset_seeds_differ_between_evaluations():
    venv = FakeVectorEnv(2)
    evaluator = Evaluator(venv, episodes=2, seed=5)
    first = evaluator.evaluate(FakePolicy())
    second = evaluator.evaluate(FakePolicy())
    assert venv.reset_seeds == [5, 5 + 100_003]
    assert evaluator.count == 2
    np.testing.assert_array_equal(first.returns, second.returns)


class FixedLengthEnv(gym.Env):
    """Episodes of exactly ``length`` steps, reward ``length`` per step."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int):
        self.length = length
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), float(self.length), self.t >= self.length, False, {}


def test_balanced_with_real_sync_vector_env():
    n, episodes = 3, 8
    venv = SyncVectorEnv([lambda k=k: FixedLengthEnv(k + 1) for k in range(n)])
    try:
        result = Evaluator(venv, episodes=episodes, seed=1).evaluate(FakePolicy())
    finally:
        venv.close()
    quota = expected_quota(episodes, n)  # 3, 3, 2
    assert [int(np.sum(result.lengths == k + 1)) for k in range(n)] == quota
    assert result.mean == pytest.approx((3 * 1 + 3 * 4 + 2 * 9) / 8)


def test_truncated_episodes_count_too():
    n = 2
    venv = SyncVectorEnv([lambda k=k: gym.wrappers.TimeLimit(FixedLengthEnv(100), max_episode_steps=k + 2)
                          for k in range(n)])
    try:
        result = Evaluator(venv, episodes=4, seed=0).evaluate(FakePolicy())
    finally:
        venv.close()
    assert sorted(result.lengths.tolist()) == [2, 2, 3, 3]
    assert result.mean == pytest.approx((200 + 200 + 300 + 300) / 4)


def test_reported_evaluator_judges_by_the_episodes_collectors_ran_and_says_once_when_there_are_none(caplog):
    """The relay's --remote-env: no env on the trainer, the workers' test episodes are the evaluation."""
    from relayrl.training.evaluator import ReportedEvaluator

    batches = [[], [10.0, 20.0], [], [5.0]]
    evaluator = ReportedEvaluator(lambda: batches.pop(0), missing="run the workers with net.test_episode_interval")
    with caplog.at_level("WARNING", logger="relayrl"):
        assert evaluator.evaluate(None) is None  # nothing reported yet: no evaluation, and the fix is named
        result = evaluator.evaluate(None)
        assert result.mean == 15.0 and len(result.returns) == 2 and evaluator.count == 1
        assert evaluator.evaluate(None) is None
        assert evaluator.evaluate(None).mean == 5.0 and evaluator.count == 2
    assert [r.getMessage() for r in caplog.records] == ["run the workers with net.test_episode_interval"]
