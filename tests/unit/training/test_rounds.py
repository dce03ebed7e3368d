"""relayrl.training.rounds: the typed hand-off of a round, a Batch on-policy or UpdatesDue off-policy,
to the LearningStep that learns from it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.core import Algorithm, SampleSource
from relayrl.envs import make_vec
from relayrl.options import ReplayLoopConfig
from relayrl.training.collector import OnPolicyCollector
from relayrl.training.learner import Learner
from relayrl.training.offpolicy import ReplayRounds, ReplayUpdates
from relayrl.training.onpolicy import OnPolicyRounds
from relayrl.training.rounds import UpdatesDue


class CountingAlgo(Algorithm):
    """Counts the minibatches it learns from (no policy to drive)."""

    def __init__(self):
        self.batches = []

    def learn(self, batch, progress=0.0):
        self.batches.append(batch)
        return {"loss": 1.0}

    def set_progress(self, env_steps, total_steps):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class SteadySource(SampleSource):
    """Delivers ``n`` transitions per pull."""

    def __init__(self, n):
        self.n = n

    def reset(self, seed):
        pass

    def pull(self):
        return {"obs": np.zeros((self.n, 2), np.float32), "reward": np.ones(self.n, np.float32)}, self.n

    def pop_episodes(self):
        return [], []


def test_replay_rounds_hand_over_the_updates_due_and_replay_updates_run_them():
    """Off-policy, a round's work says how many updates are due (none before start_training), and the
    learning step runs exactly that many, one minibatch each."""
    cfg = ReplayLoopConfig(buffer_size=100, batch_size=4, start_training=8, updates_per_step=2.0)
    algo = CountingAlgo()
    rounds = ReplayRounds(algo, SteadySource(5), cfg, seed=0, total_steps=1000)
    assert isinstance(rounds.learning, ReplayUpdates)
    learner = Learner(rounds.learning)
    first, steps = rounds.gather(learner.ctx.env_steps, learner.ctx.updates)
    assert first == UpdatesDue(0) and steps == 5  # 5 < start_training: nothing due yet
    learner.ctx.env_steps += steps
    learner.learn(first)
    assert algo.batches == [] and learner.ctx.updates == 0
    second, steps = rounds.gather(learner.ctx.env_steps, learner.ctx.updates)
    assert isinstance(second, UpdatesDue) and second.n == 2 * (10 - 8)  # 2 per step since the 8th
    metrics = learner.learn(second)
    assert len(algo.batches) == second.n == metrics["updates"] == learner.ctx.updates
    assert all(len(batch["obs"]) == cfg.batch_size for batch in algo.batches)
    with pytest.raises(dataclasses.FrozenInstanceError):
        second.n = 0  # the hand-off is a value


def test_on_policy_rounds_hand_over_the_rollout_to_the_algorithm():
    """On-policy, a round's work is the [T, N] rollout itself, and the algorithm is what learns from it."""
    cfg = build_config("ppo").ppo
    venv = make_vec("CartPole-v1", num_envs=2)
    try:
        algo = get_algo("ppo").algo_cls(cfg, venv.single_observation_space, venv.single_action_space, venv.num_envs)
        rounds = OnPolicyRounds(algo, OnPolicyCollector(venv, algo.policy, num_steps=4))
        rounds.reset(seed=0)
        work, steps = rounds.gather(0, 0)
        assert not isinstance(work, UpdatesDue) and steps == 8
        assert work["obs"].shape == (4, 2, 4) and work["reward"].shape == (4, 2)
        assert rounds.learning is algo
    finally:
        venv.close()
