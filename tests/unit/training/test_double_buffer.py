"""Double-buffered collection (``env.groups``, training/double_buffer.py): the rollout (on-policy) or the
transitions (off-policy) of two groups stepped in turn are those of one vector env of all their envs; a group's
step is under way while the policy acts for the other; the options it cannot work with are refused."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from relayrl.core import Policy
from relayrl.envs import make_vec
from relayrl.errors import ConfigError
from relayrl.testing import masked  # noqa: F401  (registers relayrl-test/MaskedChoice-v0)
from relayrl.training.collector import OffPolicyCollector, OnPolicyCollector
from relayrl.training.double_buffer import DoubleBufferedCollector, DoubleBufferedReplayCollector
from relayrl.types import PolicyOutput


class PushTowardsTheLean(Policy):
    """A policy whose every output is a function of the observation alone (so the grouping cannot change it)."""

    action_shape = ()
    action_dtype = np.int64
    obs_dtype = np.dtype(np.float32)

    def __init__(self, on_act=None):
        self.update_norm = False
        self.on_act = on_act

    def act(self, obs, mode):
        if self.on_act is not None:
            self.on_act(len(obs))
        action = (obs[:, 2] > 0).astype(np.int64)
        return PolicyOutput(action=action, env_action=action, logp=-np.abs(obs[:, 0]).astype(np.float32),
                            value=obs.sum(1).astype(np.float32), obs=obs.copy())

    def value(self, obs, rows=None):
        return (2 * obs.sum(1)).astype(np.float32)

    def get_weights(self):
        return {}

    def set_weights(self, weights, version=None):
        pass


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_two_groups_collect_the_rollout_of_one_vector_env_of_all_their_envs(manager):
    horizon, steps, seed = 9, 20, 5  # truncations (bootstrapped from the final observation) inside the rollout
    whole = make_vec("CartPole-v1", 4, max_episode_steps=horizon, manager="sync")
    extra = {"workers": 1} if manager == "subproc" else {}
    halves = [make_vec("CartPole-v1", 2, max_episode_steps=horizon, manager=manager, **extra) for _ in range(2)]
    try:
        one = OnPolicyCollector(whole, PushTowardsTheLean(), steps)
        two = DoubleBufferedCollector(halves, PushTowardsTheLean(), steps)
        one.reset(seed)
        two.reset(seed)
        for _ in range(2):  # the second rollout goes on from where the first left the envs
            a, b = one.collect(), two.collect()
            assert a.keys() == b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            assert a["truncated"].any()
        lengths = one.pop_episodes()[1]
        assert lengths and sorted(lengths) == sorted(two.pop_episodes()[1])
    finally:
        whole.close()
        for venv in halves:
            venv.close()


class LowestAllowed(Policy):
    """Takes the lowest option the mask allows (MaskedChoice pays for it): a function of the mask alone."""

    action_shape = ()
    action_dtype = np.int64
    obs_dtype = np.dtype(np.float32)
    masks_actions = True

    def __init__(self):
        self.update_norm = False

    def act(self, obs, mode, action_mask=None):
        action = np.argmax(action_mask, axis=1).astype(np.int64)
        return PolicyOutput(action=action, env_action=action, logp=np.zeros(len(obs), np.float32),
                            value=np.zeros(len(obs), np.float32), obs=obs.copy())

    def value(self, obs, rows=None):
        return np.zeros(len(obs), np.float32)

    def get_weights(self):
        return {}

    def set_weights(self, weights, version=None):
        pass


@pytest.mark.parametrize("env_id, policy, manager, n_step", [
    ("CartPole-v1", PushTowardsTheLean, "sync", 1),
    ("CartPole-v1", PushTowardsTheLean, "sync", 3),
    ("CartPole-v1", PushTowardsTheLean, "subproc", 3),
    ("relayrl-test/MaskedChoice-v0", LowestAllowed, "sync", 3),  # next_action_mask: the final one at episode ends
])
def test_two_groups_collect_the_transitions_of_one_vector_env_of_all_their_envs(env_id, policy, manager, n_step):
    """Every pull's transitions equal one OffPolicyCollector's, row for row: by step, then by env (group 0's envs,
    then group 1's), the order one vector env of all the envs gives; n-step windows run across pulls and are cut
    at episode ends, truncated ones going to the final observation."""
    horizon, steps, seed = 9, 7, 5  # episodes end inside a pull and between pulls
    whole = make_vec(env_id, 4, max_episode_steps=horizon, manager="sync")
    extra = {"workers": 1} if manager == "subproc" else {}
    halves = [make_vec(env_id, 2, max_episode_steps=horizon, manager=manager, **extra) for _ in range(2)]
    try:
        one = OffPolicyCollector(whole, policy(), n_step, 0.9, steps_per_pull=steps)
        two = DoubleBufferedReplayCollector(halves, policy(), n_step, 0.9, steps_per_pull=steps)
        one.reset(seed)
        two.reset(seed)
        cut = 0
        for _ in range(4):
            (a, steps_a), (b, steps_b) = one.pull(), two.pull()
            assert steps_a == steps_b == steps * 4
            assert a.keys() == b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            cut += int(np.count_nonzero(~a["terminated"] & (a["discount"] > 0.9 ** n_step + 1e-6)))  # truncated
        assert cut or n_step == 1
        assert (env_id == "CartPole-v1") == ("next_action_mask" not in a)
        lengths = one.pop_episodes()[1]
        assert horizon in lengths and sorted(lengths) == sorted(two.pop_episodes()[1])
    finally:
        whole.close()
        for venv in halves:
            venv.close()


@pytest.mark.parametrize("collector", [
    lambda venvs, policy: DoubleBufferedCollector(venvs, policy, 6),
    lambda venvs, policy: DoubleBufferedReplayCollector(venvs, policy, 3, 0.99, steps_per_pull=6),
], ids=["rollouts", "transitions"])
def test_the_policy_acts_for_one_group_while_the_other_steps(collector):
    halves = [make_vec("CartPole-v1", 2, manager="subproc", workers=1) for _ in range(2)]
    pending_when_acting = []

    def on_act(n):
        pending_when_acting.append([bool(venv._pending) for venv in halves])

    try:
        collector = collector(halves, PushTowardsTheLean(on_act))
        collector.reset(0)
        collector.pull()
        # the first act of a rollout comes before any step; from then on, the other group is always stepping
        assert pending_when_acting[0] == [False, False]
        later = pending_when_acting[1:]
        assert later and all(sum(flags) == 1 for flags in later), pending_when_acting
    finally:
        for venv in halves:
            venv.close()


def test_a_recurrent_policy_is_refused():
    policy = PushTowardsTheLean()
    policy.recurrent = True
    with pytest.raises(ConfigError, match="env.groups=1"):
        DoubleBufferedCollector([], policy, 4)
    with pytest.raises(ConfigError, match="env.groups=1"):
        DoubleBufferedReplayCollector([], policy, 1, 0.99)


@pytest.mark.parametrize("collector", [
    lambda venvs, policy: DoubleBufferedCollector(venvs, policy, 6),
    lambda venvs, policy: DoubleBufferedReplayCollector(venvs, policy, 1, 0.99),
], ids=["rollouts", "transitions"])
def test_whole_episodes_are_recorded_from_one_vector_env_not_from_groups(collector):
    halves = [make_vec("CartPole-v1", 2) for _ in range(2)]
    try:
        with pytest.raises(ConfigError, match=r"collect_episodes.*env.groups=1"):
            collector(halves, PushTowardsTheLean()).collect_episodes(4)
    finally:
        for venv in halves:
            venv.close()


def test_groups_that_cannot_work_are_refused_from_the_cli_before_anything_starts(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", "CartPole-v1", "--set",
                           "env.groups=3", "--run-dir", str(run_dir), "--total-steps", "1000"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "multiple of groups" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize("algo, options, problem", [
    ("ppo", {"env": {"groups": 2, "manager": "sync"}}, "not manager sync"),
    ("ppo", {"env": {"groups": 2}, "ppo": {"recurrent": "lstm"}}, "feed-forward policy"),
    ("dqn", {"env": {"groups": 2, "manager": "async"}}, "not manager async"),
    ("dqn", {"env": {"groups": 3}}, "multiple of groups"),
])
def test_groups_that_cannot_overlap_anything_are_refused(tmp_path, algo, options, problem):
    from relayrl.api import train

    with pytest.raises(ConfigError, match=problem):
        train(algo, "CartPole-v1", options, run_dir=tmp_path / "run", total_steps=1000)
    assert not (tmp_path / "run").exists()


def test_dqn_trains_on_two_groups_from_the_cli(tmp_path):
    """Replay collection double-buffers too: the run collects its budget on two groups and finishes."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "relayrl", "train", "dqn", "--env", "CartPole-v1", "--set",
                           "env.groups=2", "--set", "dqn.start_training=200", "--set", "eval.episodes=2",
                           "--run-dir", str(run_dir), "--total-steps", "1000"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 1000, summary


def test_ppo_learns_cartpole_on_two_groups_of_subproc_envs(tmp_path):
    from relayrl.api import train

    run = train("ppo", "CartPole-v1", {"env": {"groups": 2, "manager": "subproc"}}, run_dir=tmp_path / "run",
                total_steps=30_000, seed=1)
    assert run.summary["best_eval_return"] >= 150, run.summary  # random play ~20; 500 reached at 20k steps
