import numpy as np
import pytest

pytest.importorskip("pettingzoo")
from pettingzoo.test import parallel_api_test  # noqa: E402

from relayrl.envs.multiagent import MultiAgentVectorEnv  # noqa: E402
from relayrl.envs.vector import ActionError  # noqa: E402
from relayrl.testing.multiagent_envs import SpawningEnv  # noqa: E402


def test_the_test_env_is_a_valid_parallel_env():
    parallel_api_test(SpawningEnv(length=5), num_cycles=20)


def test_agents_are_rows_and_may_appear_and_leave():
    with MultiAgentVectorEnv([SpawningEnv, SpawningEnv]) as venv:
        batch = venv.reset(seed=0)
        assert batch.agent_ids == ["a_0", "a_1", "a_0", "a_1"] and list(batch.env_ids) == [0, 0, 1, 1]
        assert batch.obs.shape == (4, 2)
        out = venv.step(np.array([1, 2, 0, 1]))
        np.testing.assert_array_equal(out.transitions.reward, [1, 2, 0, 1])
        out = venv.step(np.ones(4, np.int64))  # step 2: a_2 appears in both copies
        assert out.next.agent_ids == ["a_0", "a_1", "a_2"] * 2
        assert out.transitions.agent_ids == ["a_0", "a_1"] * 2  # no transition for the newcomer
        np.testing.assert_array_equal(out.next.obs[2], [2, 2])
        out = venv.step(np.zeros(6, np.int64))  # step 3: a_0 terminates
        t = out.transitions
        assert list(t.terminated) == [True, False, False] * 2
        np.testing.assert_array_equal(t.final_obs[0], [0, 3])
        assert out.next.agent_ids == ["a_1", "a_2"] * 2
        assert t.info[1] == {"t": 3}
        out = venv.step(np.zeros(4, np.int64))  # step 4
        out = venv.step(np.zeros(4, np.int64))  # step 5: everyone truncates, both copies reset
        assert out.transitions.truncated.all()
        np.testing.assert_array_equal(out.transitions.final_obs[:, 1], [5, 5, 5, 5])
        assert out.next.agent_ids == ["a_0", "a_1"] * 2
        np.testing.assert_array_equal(out.next.obs[:, 1], [0, 0, 0, 0])


def test_wrong_number_of_actions_is_refused():
    with MultiAgentVectorEnv([SpawningEnv]) as venv:
        venv.reset(seed=0)
        with pytest.raises(ActionError, match="shape"):
            venv.step(np.zeros(3, np.int64))
        with pytest.raises(ActionError, match="out of range"):
            venv.step(np.array([0, 5]))
