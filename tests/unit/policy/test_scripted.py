"""A scripted or human policy acting for a worker (policy/scripted.py): what it returns goes to the env, what
replay stores is what the learner's own policy would store, and every mistake is one message."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from relayrl.algos import get_algo
from relayrl.cli import main
from relayrl.config import build_config
from relayrl.errors import ConfigError
from relayrl.policy.scripted import ScriptedPolicy, load_script
from relayrl.testing import scripted


def policy_of(algo: str, env_id: str):
    env = gym.make(env_id)
    cfg = build_config(algo, {}, (), {"env.id": env_id}).algo_config
    return get_algo(algo).build_policy(cfg, env.observation_space, env.action_space), env


def test_a_box_action_goes_to_the_env_as_returned_and_is_stored_as_the_learner_stores_its_own():
    inner, env = policy_of("sac", "Pendulum-v1")
    policy = ScriptedPolicy(inner, scripted.pendulum_swing, "pendulum_swing")
    obs = np.stack([env.reset(seed=s)[0] for s in range(4)])
    out = policy.act(obs)
    np.testing.assert_array_equal(out.env_action, scripted.pendulum_swing(obs))
    own = inner.act(obs)  # SAC's own: the env action is the stored one scaled to the bounds [-2, 2]
    np.testing.assert_allclose(own.env_action, 2.0 * own.action, rtol=1e-5)
    np.testing.assert_allclose(out.action, out.env_action / 2.0, rtol=1e-6)
    assert out.action.dtype == own.action.dtype and out.action.shape == own.action.shape


def test_a_discrete_action_is_stored_as_its_index():
    inner, env = policy_of("dqn", "CartPole-v1")
    obs = np.stack([env.reset(seed=s)[0] for s in range(5)])
    out = ScriptedPolicy(inner, scripted.cartpole_balance, "cartpole_balance").act(obs)
    assert out.action.dtype == inner.action_dtype and (out.action == scripted.cartpole_balance(obs)).all()


@pytest.mark.parametrize("name, words", [
    ("wrong_shape", "returned actions of shape [2, 3]: return [2, 1] actions"),
    ("out_of_bounds", "outside the bounds"),
    ("raises", "RuntimeError: joystick unplugged"),
])
def test_a_function_that_answers_wrongly_is_refused_when_the_worker_is_built(name, words):
    inner, _ = policy_of("sac", "Pendulum-v1")
    with pytest.raises(ConfigError, match="--policy") as info:
        ScriptedPolicy(inner, getattr(scripted, name), name)
    assert words in str(info.value)


@pytest.mark.parametrize("reference, words", [
    ("no_such_module_here:f", "cannot import module 'no_such_module_here'"),
    ("relayrl.testing.scripted:pendulum_swnig", "did you mean relayrl.testing.scripted:pendulum_swing"),
    ("relayrl.testing.scripted", "expected \"package.module:name\""),
])
def test_a_reference_that_names_no_function_is_one_message(reference, words):
    with pytest.raises(ConfigError, match="--policy") as info:
        load_script(reference)
    assert words in str(info.value)


@pytest.mark.parametrize("args, words", [
    (["--policy", "relayrl.testing.scripted:wrong_shape"], "returned actions of shape"),
    (["--policy", "relayrl.testing.scripted:raises"], "joystick unplugged"),
    (["--policy", "relayrl.testing.scripted:pendulum_swing", "--algo", "ppo"], "on-policy algorithm"),
])
def test_relayrl_worker_with_a_bad_policy_exits_2_before_connecting(args, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["worker", "--server", "127.0.0.1:9", "--env", "Pendulum-v1", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing written (no weights folder)


def test_the_driver_of_docs_remote_md_is_a_policy_a_worker_takes():
    from pathlib import Path
    import re
    import textwrap

    page = (Path(__file__).resolve().parents[3] / "docs" / "remote.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "def drive" in b)
    namespace: dict = {}
    exec(compile(textwrap.dedent(block), "my_driver.py", "exec"), namespace)
    inner, env = policy_of("sac", "Pendulum-v1")
    obs = np.stack([env.reset(seed=s)[0] for s in range(3)])
    out = ScriptedPolicy(inner, namespace["drive"], "my_driver:drive").act(obs)
    assert out.env_action.shape == (3, 1)
