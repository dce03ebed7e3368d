"""PettingZoo agents with Dict observations and action masks (relayrl/envs/agentobs.py, multiagent.py): the
``action_mask`` entry or ``info["action_mask"]`` becomes the turn's mask rows, the rest one array per agent
(the entry itself, or packed), and masks that do not fit are refused naming the agent."""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from relayrl.envs.masks import ActionMaskError  # noqa: E402
from relayrl.envs.multiagent import MultiAgentVectorEnv  # noqa: E402
from relayrl.envs.packed import PackedDict  # noqa: E402
from relayrl.errors import EnvError  # noqa: E402
from relayrl.testing.multiagent_envs import MaskedPickEnv, SpawningEnv  # noqa: E402


class BoardEnv(SpawningEnv):
    """SpawningEnv's agents with PettingZoo classic's observation: {"observation": [agent, t], "action_mask"};
    agent a_k may take actions other than k % 3. ``mask`` (a function of agent and t) replaces the mask."""

    def __init__(self, mask=None):
        super().__init__(length=5)
        self.mask = mask or (lambda agent, t: np.arange(3) != int(agent[-1]) % 3)
        self._obs_space = gym.spaces.Dict({"observation": self._obs_space,
                                           "action_mask": gym.spaces.Box(0, 1, (3,), np.int8)})

    def _obs(self, agent):
        return {"observation": super()._obs(agent), "action_mask": np.asarray(self.mask(agent, self.t), np.int8)}


def test_a_classic_dict_becomes_the_plain_observation_and_the_turns_masks():
    """{"observation", "action_mask"}: rows are the observation entry itself (as with_masks does for one env),
    masks follow each row's agent, also for agents that appear later; final observations drop the mask."""
    with MultiAgentVectorEnv([BoardEnv, BoardEnv]) as venv:
        assert venv.single_observation_space == gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        turn = venv.reset(seed=0)
        assert turn.obs.shape == (4, 2) and turn.action_mask.dtype == bool
        np.testing.assert_array_equal(turn.action_mask, [[0, 1, 1], [1, 0, 1]] * 2)
        for _ in range(2):
            turn = venv.step(np.full(len(turn.ids), 2))
        assert list(turn.ids) == [0, 1, 2, 3, 4, 5]  # a_2 appeared: forbidden its own action 2
        np.testing.assert_array_equal(turn.action_mask, [[0, 1, 1], [1, 0, 1], [1, 1, 0]] * 2)
        turn = venv.step(np.array([1, 0, 0, 1, 0, 0]))  # step 3: a_0 terminates in both copies
        assert list(turn.end_ids) == [0, 3] and turn.end_obs.shape == (2, 2)
        np.testing.assert_array_equal(turn.end_obs, [[0, 3], [0, 3]])
        assert turn.action_mask.shape == (4, 3)


@pytest.mark.parametrize("mask_in", ["obs", "info"])
def test_several_entries_are_packed_and_masks_come_from_the_dict_or_the_infos(mask_in):
    with MultiAgentVectorEnv([lambda: MaskedPickEnv(mask_in=mask_in)] * 2) as venv:
        space = venv.single_observation_space
        assert isinstance(space, PackedDict) and set(space.space.spaces) == {"agent", "target"}
        turn = venv.reset(seed=3)
        envs = venv.envs
        expected = np.stack([env.masks[a] for env in envs for a in env.agents]).astype(bool)
        np.testing.assert_array_equal(turn.action_mask, expected)
        unpacked = space.unpack(turn.obs)
        np.testing.assert_array_equal(unpacked["agent"], [0, 1, 0, 1])
        np.testing.assert_array_equal(unpacked["target"], np.repeat([env.target for env in envs], 2))
        turn = venv.step(turn.action_mask.argmax(1))
        np.testing.assert_array_equal(turn.action_mask,
                                      np.stack([env.masks[a] for env in envs for a in env.agents]).astype(bool))


def test_an_env_without_masks_gives_none():
    with MultiAgentVectorEnv([SpawningEnv]) as venv:
        assert venv.reset(seed=0).action_mask is None


def test_masks_that_do_not_fit_are_refused_naming_the_agent():
    with pytest.raises(EnvError, match=r"agent 'a_0': the 'action_mask' entry .*\(4,\).*Discrete\(5\) takes a mask "
                                       r"of 5.*declare it as Box\(0, 1, \(5,\), int8\)"):
        MultiAgentVectorEnv([lambda: MaskedPickEnv(mask_width=4)])
    with MultiAgentVectorEnv([lambda: MaskedPickEnv(mask_in="info", mask_width=4)]) as venv:
        with pytest.raises(ActionMaskError, match=r"agent 'a_0' of env copy 0: info\['action_mask'\] has shape "
                                                  r"\(4,\).*give 5 entries"):
            venv.reset(seed=0)
    nothing_at_t2 = BoardEnv(mask=lambda agent, t: np.full(3, agent != "a_1" or t != 2))
    with MultiAgentVectorEnv([lambda: nothing_at_t2]) as venv:
        venv.reset(seed=0)
        venv.step(np.array([1, 0]))
        with pytest.raises(ActionMaskError, match=r"agent 'a_1' of env copy 0: observation\['action_mask'\] allows "
                                                  r"no action"):
            venv.step(np.array([1, 0]))


def test_dicts_that_cannot_be_rows_are_refused_naming_the_key():
    class MaskedBox(BoardEnv):
        def action_space(self, agent):
            return gym.spaces.Box(-1, 1, (2,), np.float32)

    with pytest.raises(EnvError, match=r"agent 'a_0': its observation has an 'action_mask' entry, but its action "
                                       r"space Box.*takes no action mask.*drop the entry"):
        MultiAgentVectorEnv([MaskedBox])

    class WithText(MaskedPickEnv):
        def observation_space(self, agent):
            return gym.spaces.Dict({**super().observation_space(agent).spaces, "name": gym.spaces.Text(4)})

    with pytest.raises(EnvError, match=r"key 'name' is Text.*Fix: drop the key"):
        MultiAgentVectorEnv([WithText])
