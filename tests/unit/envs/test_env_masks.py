"""Action masks through the env managers: from info or a Dict observation to StepResult, reset included,
the final observation's mask at an autoreset, and one clear error for a mask that does not fit."""

from __future__ import annotations


import gymnasium as gym
import numpy as np
import pytest

from relayrl.envs.managers import make_vec
from relayrl.envs.masks import ActionMaskError, check_mask, sample_allowed
from relayrl.testing.masked import MaskedChoiceEnv

ENV = "relayrl.testing.masked:relayrl-test/MaskedChoice-v0"


def masks_of(env: MaskedChoiceEnv) -> np.ndarray:
    return env.unwrapped.mask.copy()


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_masks_reach_reset_and_every_step_with_the_final_mask_at_autoreset(manager):
    options = {"workers": 2} if manager == "subproc" else {}
    with make_vec(ENV, 2, manager=manager, env_kwargs={"length": 3}, **options) as venv:
        venv.reset(seed=0)
        reference = [MaskedChoiceEnv(length=3) for _ in range(2)]  # the same envs, stepped beside them
        for k, env in enumerate(reference):
            env.reset(seed=k)
        np.testing.assert_array_equal(venv.reset_action_mask(), [masks_of(e) for e in reference])
        for t in range(4):
            actions = np.array([sample_allowed(e.action_space, e.mask) for e in reference])
            result = venv.step(actions)
            expected, final = [], []
            for env, action in zip(reference, actions):
                env.step(action)
                final.append(masks_of(env))
                if env.t >= 3:
                    env.reset()
                expected.append(masks_of(env))
            np.testing.assert_array_equal(result.action_mask, expected)
            if result.done.any():  # the mask of the last observation, and the new episode's
                np.testing.assert_array_equal(result.final_action_mask[result.done], np.array(final)[result.done])
            assert all("action_mask" not in info for info in result.info)  # it travels in the arrays


def test_a_dict_observation_gives_its_mask_and_keeps_the_rest():
    with make_vec(ENV, 2, env_kwargs={"dict_obs": True}) as venv:
        assert venv.single_observation_space == gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        obs = venv.reset(seed=0)
        assert obs.shape == (2, 2)
        mask = venv.reset_action_mask()
        assert mask.dtype == bool and mask.shape == (2, 5) and (mask.sum(1) == 2).all()


def test_envs_without_masks_give_none():
    with make_vec("CartPole-v1", 2) as venv:
        venv.reset(seed=0)
        assert venv.reset_action_mask() is None and venv.step(np.array([0, 1])).action_mask is None


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_a_mask_of_the_wrong_length_is_one_message_naming_the_space_and_the_fix(manager):
    options = {"workers": 1} if manager == "subproc" else {}
    with pytest.raises(ActionMaskError) as info:
        make_vec(ENV, 1, manager=manager, seed=0, env_kwargs={"nvec": [3, 4], "bad_width": True}, **options)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == 2
    assert "shape (6,)" in message and "MultiDiscrete([3 4])" in message and "7 booleans" in message
    assert "blocks of 3, 4" in message


def test_check_mask_refuses_a_branch_with_nothing_allowed_and_non_booleans():
    space = gym.spaces.MultiDiscrete([2, 3])
    assert check_mask([1, 0, 0, 0, 1], space, "m").tolist() == [True, False, False, False, True]
    with pytest.raises(ActionMaskError, match="allows no action of branch 1"):
        check_mask([True, True, False, False, False], space, "m")
    with pytest.raises(ActionMaskError, match="booleans or 0/1"):
        check_mask([0.5, 1, 1, 1, 1], space, "m")
    with pytest.raises(ActionMaskError, match="takes no action mask"):
        check_mask([True], gym.spaces.Box(-1, 1, (1,)), "m")


def test_the_auto_manager_probe_takes_only_allowed_actions():
    from relayrl.envs.auto import measure_step_cost

    before = MaskedChoiceEnv.forbidden_taken
    measure_step_cost(ENV, {"nvec": [3, 4]}, steps=30)
    assert MaskedChoiceEnv.forbidden_taken == before


def test_sample_allowed_draws_every_allowed_option_and_nothing_else():
    space = gym.spaces.Discrete(4, start=1)
    space.seed(0)
    drawn = {int(sample_allowed(space, [False, True, False, True])) for _ in range(50)}
    assert drawn == {2, 4}


