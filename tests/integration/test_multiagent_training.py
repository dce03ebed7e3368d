"""PettingZoo ParallelEnvs trained through the real Trainer:
``run_trainer(config, experience=AgentExperience(*multiagent_envs(config, env_fn)))`` (relayrl/envs/multiagent.py), one shared policy for every agent of every env copy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from relayrl.config import build_config  # noqa: E402
from relayrl.envs.multiagent import MultiAgentVectorEnv, multiagent_envs  # noqa: E402
from relayrl.io.checkpoint import load_checkpoint  # noqa: E402
from relayrl.testing.multiagent_envs import SpawningEnv, TeamMatchEnv  # noqa: E402
from relayrl.training.agent_collectors import AgentEvaluator  # noqa: E402
from relayrl.training.experience import AgentExperience  # noqa: E402
from relayrl.training.trainer import run_trainer  # noqa: E402
from relayrl.testing.policies import UniformPolicy  # noqa: E402


def test_ppo_learns_a_cooperative_pettingzoo_env(tmp_path):
    """TeamMatchEnv: two agents per copy share the team's reward (8 per episode at best, 8/3 at random).
    Each step is a bandit, so a short horizon (gamma 0.5) keeps the team's noise out of the advantages."""
    config = build_config("ppo", None, ["env.num_envs=4", "ppo.num_steps=32", "ppo.batch_size=128", "ppo.gamma=0.5",
                                        "eval.freq=0", "eval.episodes=8", "eval.num_envs=4"],
                          {"total_steps": 4096, "env.id": "team_match"})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False,
                          experience=AgentExperience(*multiagent_envs(config, TeamMatchEnv)))
    with MultiAgentVectorEnv([TeamMatchEnv] * 4) as env:
        random_return = AgentEvaluator(env, 8, seed=1).evaluate(UniformPolicy(env.single_observation_space, env.single_action_space)).mean
    assert random_return < 4.0
    assert summary["env_steps"] >= 4096 and summary["last_eval_return"] >= 7.0, (summary, random_return)


def test_dqn_trains_on_agents_that_come_and_go(tmp_path):
    """SpawningEnv (agents join, terminate and truncate; copies autoreset): DQN runs, and every stored
    transition is one agent's own step: obs [agent, t] -> next_obs [agent, t + 1], reward = action,
    terminated only where a_0 ends at t = 3 (truncation at t = 5 is not terminal)."""
    config = build_config("dqn", None, ["env.num_envs=2", "dqn.start_training=64", "dqn.batch_size=32",
                                        "dqn.hidden_sizes=[32]", "eval.freq=0", "eval.episodes=4", "eval.num_envs=2"],
                          {"total_steps": 300, "env.id": "spawning"})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False,
                          experience=AgentExperience(*multiagent_envs(config, SpawningEnv)))
    assert summary["env_steps"] >= 300 and summary["updates"] > 0 and summary["last_eval_return"] is not None
    stored = load_checkpoint(tmp_path / "run" / "checkpoints" / "replay").state["storage"]["arrays"]
    obs, next_obs = stored["obs"], stored["next_obs"]
    assert len(obs) == summary["env_steps"]
    np.testing.assert_array_equal(next_obs[:, 0], obs[:, 0])
    np.testing.assert_array_equal(next_obs[:, 1], obs[:, 1] + 1)
    np.testing.assert_array_equal(stored["reward"], stored["action"])
    np.testing.assert_array_equal(stored["terminated"], (obs[:, 0] == 0) & (next_obs[:, 1] == 3))
    assert (obs[:, 0] == 2).any() and (next_obs[:, 1] == 5).any()  # the newcomer and truncations are in
