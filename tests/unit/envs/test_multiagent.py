"""PettingZoo ParallelEnvs as an agent env (relayrl/envs/multiagent.py): ids, deciders, ends, autoreset."""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")
from pettingzoo.test import parallel_api_test  # noqa: E402

from relayrl.envs.agents import AgentEnv  # noqa: E402
from relayrl.envs.multiagent import MultiAgentVectorEnv  # noqa: E402
from relayrl.envs.vector import ActionError  # noqa: E402
from relayrl.errors import EnvError  # noqa: E402
from relayrl.testing.multiagent_envs import SpawningEnv, TeamMatchEnv  # noqa: E402


def test_the_test_envs_are_valid_parallel_envs():
    parallel_api_test(SpawningEnv(length=5), num_cycles=20)
    parallel_api_test(TeamMatchEnv(length=5), num_cycles=20)


def test_agents_are_rows_with_stable_ids_and_may_appear_and_leave():
    """SpawningEnv: a_0, a_1 start; a_2 appears at step 2; a_0 terminates at step 3; all truncate at 5.
    Ids: copy 0 has 0, 1, 2 (a_0, a_1, a_2), copy 1 has 3, 4, 5."""
    with MultiAgentVectorEnv([SpawningEnv, SpawningEnv]) as venv:
        assert isinstance(venv, AgentEnv) and venv.num_envs == 6
        turn = venv.reset(seed=0)
        assert list(turn.ids) == [0, 1, 3, 4] and turn.obs.shape == (4, 2) and turn.obs.dtype == np.float32
        assert not turn.reward.any() and len(turn.end_ids) == 0 and turn.end_obs.shape == (0, 2)
        turn = venv.step(np.array([1, 2, 0, 1]))
        assert list(turn.ids) == [0, 1, 3, 4]
        np.testing.assert_array_equal(turn.reward, [1, 2, 0, 1])  # the reward of the step each id answered
        turn = venv.step(np.ones(4, np.int64))  # step 2: a_2 appears in both copies, with no reward yet
        assert list(turn.ids) == [0, 1, 2, 3, 4, 5]
        np.testing.assert_array_equal(turn.reward, [1, 1, 0, 1, 1, 0])
        np.testing.assert_array_equal(turn.obs[2], [2, 2])
        turn = venv.step(np.array([2, 0, 0, 1, 0, 0]))  # step 3: a_0 terminates in both copies
        assert list(turn.end_ids) == [0, 3] and not turn.interrupted.any()
        np.testing.assert_array_equal(turn.end_obs, [[0, 3], [0, 3]])
        np.testing.assert_array_equal(turn.end_reward, [2, 1])
        assert list(turn.ids) == [1, 2, 4, 5]
        turn = venv.step(np.zeros(4, np.int64))  # step 4
        assert len(turn.end_ids) == 0
        turn = venv.step(np.array([1, 2, 1, 2]))  # step 5: everyone truncates, both copies reset
        assert list(turn.end_ids) == [1, 2, 4, 5] and turn.interrupted.all()
        np.testing.assert_array_equal(turn.end_obs[:, 1], [5, 5, 5, 5])
        np.testing.assert_array_equal(turn.end_reward, [1, 2, 1, 2])
        # the copies' next episodes: the same names get the same ids back, and decide at once
        assert list(turn.ids) == [0, 1, 3, 4] and not turn.reward.any()
        np.testing.assert_array_equal(turn.obs[:, 1], [0, 0, 0, 0])
        assert venv.stats == {"resets": 2}


def test_an_agent_that_leaves_without_being_done_ends_interrupted():
    class Vanishing(SpawningEnv):
        def step(self, actions):
            out = super().step(actions)
            if self.t == 1:
                self.agents.remove("a_1")
            return out

    with MultiAgentVectorEnv([Vanishing]) as venv:
        venv.reset(seed=0)
        turn = venv.step(np.array([0, 2]))
        assert list(turn.end_ids) == [1] and turn.interrupted.all() and list(turn.end_reward) == [2]
        assert list(turn.ids) == [0]


def test_wrong_actions_are_refused():
    with MultiAgentVectorEnv([SpawningEnv]) as venv:
        with pytest.raises(EnvError, match="before reset"):
            venv.step(np.zeros(2, np.int64))
        venv.reset(seed=0)
        with pytest.raises(ActionError, match="shape"):
            venv.step(np.zeros(3, np.int64))
        with pytest.raises(ActionError, match="out of range"):
            venv.step(np.array([0, 5]))


def test_unsupported_envs_are_refused_clearly():
    class TextObs(SpawningEnv):
        def observation_space(self, agent):
            return gym.spaces.Text(5)

    with pytest.raises(EnvError, match="Text.*not supported"):
        MultiAgentVectorEnv([TextObs])

    class Stranger(SpawningEnv):
        def reset(self, seed=None, options=None):
            obs, infos = super().reset(seed, options)
            self.agents.append("zed")
            obs["zed"] = obs["a_0"]
            return obs, infos

    with pytest.raises(EnvError, match="'zed'.*not in its possible_agents"):
        MultiAgentVectorEnv([Stranger]).reset(seed=0)

    class Mixed(SpawningEnv):
        def action_space(self, agent):
            return gym.spaces.Discrete(2 if agent == "a_2" else 3)

    with pytest.raises(EnvError, match="same observation and action space"):
        MultiAgentVectorEnv([Mixed])


def test_an_env_function_that_raises_is_one_message_at_its_line(tmp_path, monkeypatch):
    from relayrl.envs.multiagent import pettingzoo_factory

    (tmp_path / "raising_pz.py").write_text("def parallel_env(size=2):\n    raise RuntimeError('no map file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    make = pettingzoo_factory("pettingzoo:raising_pz:parallel_env")
    with pytest.raises(EnvError, match=r"parallel_env\(\*\*\{\}\) raised RuntimeError: no map file \(at "
                                       rf"{tmp_path / 'raising_pz.py'}:2 in parallel_env\): fix the env function"):
        make()
    with pytest.raises(EnvError, match=r"unexpected keyword argument 'colour'.*fix env.kwargs"):
        make(colour=1)
