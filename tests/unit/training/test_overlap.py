"""Learning overlapped with collection (``overlap: true``, training/overlap.py): the next rollout is collected in a
thread by a copy of the policy one version behind the learner, never a mix of versions; errors surface in ``pull``;
the options it cannot work with are refused before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from relayrl.algos import get_algo
from relayrl.config import build_config
from relayrl.envs import make_vec
from relayrl.errors import ConfigError, EnvError
from relayrl.training.collector import OffPolicyCollector, OnPolicyCollector
from relayrl.training.double_buffer import DoubleBufferedReplayCollector
from relayrl.training.experience import GymExperience
from relayrl.training.onpolicy import OnPolicyRounds
from relayrl.training.overlap import OverlappedCollector, owned_weights


def _setup(*sets: str, algo: str = "ppo"):
    entry = get_algo(algo)
    length = f"{algo}.num_steps=16" if entry.on_policy else f"{algo}.steps_per_iteration=4"
    config = build_config(algo, None, ["overlap=true", length, "env.num_envs=2", "env.manager=sync", *sets],
                          {"env.id": "CartPole-v1", "total_steps": 10_000})
    experience = GymExperience(config, on_policy=entry.on_policy)
    cfg = config.algo_config
    algo_obj = entry.build_algorithm(cfg, experience.observation_space, experience.action_space, experience.columns)
    source = experience.source(algo_obj.policy, cfg, entry.on_policy)
    return experience, algo_obj, source


def _params(policy) -> list[torch.Tensor]:
    return [p.detach().clone() for p in policy.model.parameters()]


@pytest.mark.parametrize("algo", ["ppo", "appo"])
def test_every_rollout_after_the_first_is_collected_one_version_behind(algo):
    experience, algo_obj, source = _setup(algo=algo)
    try:
        assert isinstance(source, OverlappedCollector) and not experience.shares_policy
        assert source.policy is not algo_obj.policy  # the thread acts with a copy of its own
        rounds = OnPolicyRounds(algo_obj, source, source.publish)
        rounds.reset(0)
        seen = []
        for _ in range(5):
            rollout, steps = rounds.gather(0, 0)
            assert steps == 16 * 2 and rollout["obs"].shape[:2] == (16, 2)
            seen.append((source.collected_version, algo_obj.policy.version))
            algo_obj.learn(rollout)
        assert seen[0] == (0, 0)
        assert all(collected == learner - 1 for collected, learner in seen[1:]), seen
    finally:
        experience.close()


def test_a_rollout_is_collected_with_the_weights_published_before_it_started():
    """The learner updates its parameters in place while the next rollout is collected: the weights that rollout
    acts with are the copy taken at publish, so the stored log-probabilities are those of that copy."""
    experience, algo_obj, source = _setup()
    try:
        source.reset(0)
        source.pull()  # rollout 0 pulled, rollout 1 under way (both with the initial weights)
        published = _params(algo_obj.policy)
        source.publish(algo_obj.policy.get_weights(), 5)  # on the CPU: the live parameters themselves
        with torch.no_grad():  # the learner moves on, in place, before the rollout that takes them starts
            for p in algo_obj.policy.model.parameters():
                p.add_(1.0)
        source.pull()  # rollout 1; rollout 2 starts with version 5
        rollout, _ = source.pull()
        assert source.collected_version == 5
        behaviour = source.policy
        for mine, theirs in zip(_params(behaviour), published):
            torch.testing.assert_close(mine, theirs)
        obs = torch.as_tensor(rollout["obs"].reshape(-1, 4))
        actions = torch.as_tensor(rollout["action"].reshape(-1))
        with torch.no_grad():
            logp, _ = behaviour.logp_entropy(behaviour.model.actor(obs), actions)
            moved, _ = algo_obj.policy.logp_entropy(algo_obj.policy.model.actor(obs), actions)
        np.testing.assert_allclose(rollout["logp"].reshape(-1), logp.numpy(), rtol=1e-4, atol=1e-5)
        assert not np.allclose(rollout["logp"].reshape(-1), moved.numpy(), atol=1e-3)  # not the learner's weights
    finally:
        experience.close()


def test_owned_weights_share_no_memory_with_the_policy():
    weights = {"model": {"w": torch.ones(3)}, "obs_rms": {"mean": np.zeros(2)}, "n": 4}
    copy = owned_weights(weights)
    weights["model"]["w"].add_(1)
    weights["obs_rms"]["mean"] += 1
    assert copy["model"]["w"].tolist() == [1.0, 1.0, 1.0] and copy["obs_rms"]["mean"].tolist() == [0.0, 0.0]
    assert copy["n"] == 4


def test_observation_statistics_of_the_collecting_copy_reach_the_learner():
    experience, algo_obj, source = _setup("ppo.obs_norm=true")
    try:
        rounds = OnPolicyRounds(algo_obj, source, source.publish)
        rounds.reset(0)
        before = float(algo_obj.policy.obs_rms.count)
        for _ in range(3):
            rollout, _ = rounds.gather(0, 0)
            algo_obj.learn(rollout)
        assert algo_obj.policy.obs_rms.count >= before + 3 * 16 * 2  # every observation acted on, counted once
    finally:
        experience.close()


def test_episodes_are_reported_with_the_rollout_they_ended_in():
    experience, algo_obj, source = _setup()
    try:
        source.reset(0)
        total_steps = 0
        lengths = []
        for _ in range(6):
            _, steps = source.pull()
            total_steps += steps
            lengths += source.pop_episodes()[1]
        assert lengths and sum(lengths) <= total_steps  # none from the rollout still under way
    finally:
        experience.close()


class _Breaks(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        raise RuntimeError("the simulator lost its licence")


def test_an_error_in_the_collecting_thread_is_raised_by_pull():
    venv = make_vec(_Breaks, 2, manager="sync", max_restarts=0)
    config = build_config("ppo", None, [], {"env.id": "CartPole-v1"})
    policy = get_algo("ppo").build_policy(config.ppo, venv.single_observation_space, venv.single_action_space)
    source = OverlappedCollector(OnPolicyCollector(venv, policy, 8))
    try:
        source.reset(0)
        with pytest.raises(EnvError, match="licence"):
            source.pull()
    finally:
        source.close()
        venv.close()


def test_overlap_on_rollout_workers_is_refused_from_the_cli_before_anything_starts(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", "CartPole-v1", "--set",
                           "overlap=true", "--run-dir", str(run_dir), "--total-steps", "1000", "--workers", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "rollout workers" in proc.stderr and "drop overlap" in proc.stderr and "Traceback" not in proc.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize("groups", [1, 2])
def test_off_policy_transitions_carry_the_version_that_collected_them_one_pull_behind(groups):
    """DQN: the thread collects the next steps_per_iteration steps while the learner updates; every row says which
    published version acted (``max_staleness`` counts from it), and the copy's epsilon follows the run's progress.
    With two env groups the thread's collector is the double-buffered one."""
    extra = ["env.groups=2", "env.manager=subproc"] if groups == 2 else []
    experience, algo_obj, source = _setup("dqn.n_step=1", *extra, algo="dqn")
    try:
        assert isinstance(source, OverlappedCollector) and source.policy is not algo_obj.policy
        assert isinstance(source.collector, DoubleBufferedReplayCollector if groups == 2 else OffPolicyCollector)
        source.reset(0)
        first, steps = source.pull()  # pull 0 collected with the initial weights; pull 1 under way with them too
        assert steps == 4 * 2 and len(first["obs"]) == 8 and set(first["version"].tolist()) == {0}
        source.publish(algo_obj.policy.get_weights(), 7)
        source.set_progress(10_000, 10_000)  # the end of the run: epsilon at its floor
        second, _ = source.pull()  # pull 1 (started before the publish); pull 2 starts with version 7
        assert set(second["version"].tolist()) == {0}
        third, _ = source.pull()
        assert set(third["version"].tolist()) == {7} and source.collected_version == 7
        assert source.policy.epsilon == pytest.approx(algo_obj.cfg.epsilon_end) and algo_obj.cfg.epsilon_end < 0.5
    finally:
        experience.close()


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_off_policy_algorithms_train_with_overlap(tmp_path, algo):
    """The whole loop: transitions from the thread into replay, updates, weights published back to the copy."""
    from relayrl.api import train

    env = "CartPole-v1" if algo == "dqn" else "Pendulum-v1"
    train(algo, env, {"overlap": True, f"{algo}.start_training": 200}, run_dir=tmp_path / "run", total_steps=1200,
          seed=0)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] >= 1200 and summary["updates"] > 500


@pytest.mark.parametrize("algo, problem", [("a2c", "no correction"), ("bc", "collects nothing")])
def test_overlap_for_an_algorithm_that_cannot_lag_is_refused(tmp_path, algo, problem):
    from relayrl.api import train

    with pytest.raises(ConfigError, match=f"{problem}.*drop overlap"):
        train(algo, "CartPole-v1", {"overlap": True}, run_dir=tmp_path / "run", total_steps=1000)
    assert not (tmp_path / "run").exists()


def test_overlap_with_agent_envs_is_refused_before_the_run_starts(tmp_path):
    from relayrl.api import train

    with pytest.raises(ConfigError, match="drop overlap"):
        train("ppo", "pettingzoo:relayrl.testing.multiagent_envs:relay_team", {"overlap": True},
              run_dir=tmp_path / "run", total_steps=1000)
    assert not (tmp_path / "run").exists()


def test_ppo_learns_cartpole_with_overlap(tmp_path):
    from relayrl.api import train

    run = train("ppo", "CartPole-v1", {"overlap": True}, run_dir=tmp_path / "run", total_steps=30_000, seed=1)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["best_eval_return"] >= 150, summary  # random play: ~20; measured 284-500 over seeds 0-2
    assert run.summary["env_steps"] == summary["env_steps"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_overlap_on_cuda_collects_on_a_stream_of_its_own_one_version_behind():
    config = build_config("ppo", None, ["overlap=true", "ppo.num_steps=16", "env.num_envs=4", "device=cuda"],
                          {"env.id": "CartPole-v1", "total_steps": 10_000})
    experience = GymExperience(config, on_policy=True)
    try:
        algo_obj = get_algo("ppo").build_algorithm(config.ppo, experience.observation_space, experience.action_space,
                                                   experience.columns)
        algo_obj.to(torch.device("cuda"))
        source = experience.source(algo_obj.policy, config.ppo, True)
        assert source.policy.device.type == "cuda"
        rounds = OnPolicyRounds(algo_obj, source, source.publish)
        rounds.reset(0)
        for k in range(4):
            rollout, _ = rounds.gather(0, 0)
            assert source.collected_version == max(0, algo_obj.policy.version - 1)
            algo_obj.learn(rollout)
        for mine, theirs in zip(source.policy.model.parameters(), algo_obj.policy.model.parameters()):
            assert mine.device.type == "cuda" and not torch.equal(mine, theirs)  # a version behind, on the GPU
    finally:
        experience.close()
