"""A mistake in a user's env is one EnvError (exit code 2) naming the env, what it returned, what was
expected and where its code is, on the sync manager and from subprocess env workers alike."""

from __future__ import annotations

import inspect
import re

import gymnasium as gym
import numpy as np
import pytest

from relayrl.envs import make_vec
from relayrl.errors import EnvError
from relayrl.testing.envs import MistakenEnv

MISTAKEN = "relayrl.testing.envs:relayrl-test/Mistaken-v0"


def _where(method: str) -> str:
    return f"MistakenEnv.{method} at {inspect.getsourcefile(MistakenEnv)}:" \
           f"{inspect.getsourcelines(getattr(MistakenEnv, method))[1]}"


@pytest.mark.parametrize("manager", ["sync", "subproc"])
@pytest.mark.parametrize("mistake, said", [
    ("reset_shape", ["reset returned an observation of shape (5,) where (3,) was expected", "reset"]),
    ("step_shape", ["step returned an observation of shape (5,) where (3,) was expected", "step"]),
    ("old_reset", ["reset returned a ndarray", "returns (obs, info)", "reset"]),
    ("old_step", ["step returned 4 values (obs, reward, done, info: the old Gym API)", "returns 5", "step"]),
    ("nan_reward", ["returned reward nan at step 3 of its episode", "must be a finite number", "step"]),
])
def test_an_env_mistake_is_one_message_naming_the_env_the_value_and_the_code(manager, mistake, said):
    options = {"workers": 2} if manager == "subproc" else {}
    with pytest.raises(EnvError) as info:
        with make_vec(MISTAKEN, 2, manager=manager, env_kwargs={"mistake": mistake}, **options) as venv:
            venv.reset(seed=0)
            for _ in range(5):
                venv.step(np.zeros(2, np.int64))
    message = str(info.value)
    *texts, method = said
    assert info.value.exit_code == 2, message
    assert re.search(r"env [01] \(relayrl-test/Mistaken-v0\)", message), message  # (either worker may tell first)
    assert all(text in message for text in texts), message
    assert _where(method) in message, message
    assert "Traceback" not in message and "\n" not in message


def test_a_correct_env_passes_the_checks_on_every_manager():
    for manager in ("sync", "subproc"):
        with make_vec(MISTAKEN, 2, manager=manager, seed=0) as venv:
            for _ in range(25):  # past an episode's end (20 steps) and its reset
                result = venv.step(np.zeros(2, np.int64))
            assert result.reward.tolist() == [1.0, 1.0]


def test_a_nan_reward_names_the_env_of_its_row_and_its_episode_step():
    from relayrl.envs.vector import SyncVectorEnv
    from relayrl.testing.envs import NanRewardEnv

    with SyncVectorEnv([lambda: NanRewardEnv(nan_at=100), lambda: NanRewardEnv(nan_at=6)]) as venv:
        venv.reset(seed=0)
        for _ in range(5):
            venv.step(np.ones(2, np.int64))
        with pytest.raises(EnvError, match=r"^env 1 \(NanRewardEnv\) returned reward nan at step 6 of its episode "
                                           r"\(action 1\)"):
            venv.step(np.ones(2, np.int64))


@pytest.mark.parametrize("mistake, call, said", [
    ("old_step", "step", "a Gymnasium wrapper could not unpack what step returned"),
    ("old_reset", "reset", "reset returned a ndarray, but Gymnasium's reset returns (obs, info)"),
])
def test_the_old_api_under_gymnasium_wrappers_is_named_too(mistake, call, said):
    # a registered env with a time limit and Gymnasium's env checker: their wrappers unpack the result first
    env_id = f"relayrl-test/Wrapped-{mistake}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=MistakenEnv, kwargs={"mistake": mistake}, max_episode_steps=10)
    with pytest.raises(EnvError) as info:
        with make_vec(env_id, 2, manager="sync") as venv:
            venv.reset(seed=0)
            venv.step(np.zeros(2, np.int64))
    message = str(info.value)
    assert info.value.exit_code == 2 and said in message
    assert _where(call) in message, message
