"""PettingZoo ParallelEnvs with a hybrid action space (relayrl/envs/hybrid.py): each agent's [C + B] row reaches
the env as its (continuous, discrete) tuple, and PPO trains on it."""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")
from pettingzoo import ParallelEnv  # noqa: E402

from relayrl.envs.multiagent import MultiAgentVectorEnv  # noqa: E402
from relayrl.envs.vector import ActionError  # noqa: E402

SPACE = gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.MultiDiscrete([3])))


class HybridEchoEnv(ParallelEnv):
    """Two agents; each observes the action it was given last: [continuous 0, continuous 1, discrete]. Reward:
    1 - |c0 - 0.5| + (discrete == 2). Episodes of 6 steps."""

    metadata = {"name": "relayrl_hybrid_echo_v0"}

    def __init__(self):
        self.possible_agents = ["a_0", "a_1"]

    def observation_space(self, agent):
        return gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent):
        return SPACE

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: np.zeros(3, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs, rewards = {}, {}
        for agent, action in actions.items():
            assert isinstance(action, tuple) and len(action) == 2, action  # a sample of the Tuple space's shape
            continuous, discrete = action
            assert continuous.shape == (2,) and discrete.shape == (1,) and discrete.dtype == np.int64
            obs[agent] = np.array([*continuous, discrete[0]], np.float32)
            rewards[agent] = 1.0 - abs(float(continuous[0]) - 0.5) + float(discrete[0] == 2)
        done = self.t >= 6
        self.agents = [] if done else self.agents
        return obs, rewards, {a: False for a in actions}, {a: done for a in actions}, {a: {} for a in actions}


def test_each_agent_gets_its_continuous_and_discrete_part():
    with MultiAgentVectorEnv([HybridEchoEnv]) as venv:
        assert venv.single_action_space == SPACE
        turn = venv.reset(seed=0)
        turn = venv.step(np.array([[0.25, -0.5, 2.0], [1.0, 0.0, 0.0]], np.float32))
        np.testing.assert_allclose(turn.obs, [[0.25, -0.5, 2.0], [1.0, 0.0, 0.0]])
        np.testing.assert_allclose(turn.reward, [1.75, 0.5])
        with pytest.raises(ActionError, match=r"shape \(2, 2\), expected \(2, 3\)"):
            venv.step(np.zeros((2, 2), np.float32))


def test_ppo_trains_on_hybrid_pettingzoo_agents(tmp_path):
    from relayrl.config import build_config
    from relayrl.envs.multiagent import multiagent_envs
    from relayrl.training.experience import AgentExperience
    from relayrl.training.trainer import run_trainer

    config = build_config("ppo", None, ["env.num_envs=2", "ppo.num_steps=16", "ppo.batch_size=32", "eval.freq=0",
                                        "eval.episodes=4", "eval.num_envs=1"], {"total_steps": 256, "env.id": "echo"})
    summary = run_trainer(config, run_dir=tmp_path / "run", tensorboard=False,
                          experience=AgentExperience(*multiagent_envs(config, HybridEchoEnv)))
    assert summary["env_steps"] >= 256 and summary["updates"] > 0 and summary["last_eval_return"] is not None
