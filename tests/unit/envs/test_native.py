"""The native manager: same-step autoreset over natively vectorised envs, exactly as the sync manager steps."""

import gymnasium as gym
import numpy as np
import pytest

from relayrl.config import build_config
from relayrl.envs import make_vec
from relayrl.envs.native import CartPoleAdapter, NativeVectorEnv, envpool_ids, native_stop_value, picks_native
from relayrl.envs.vector import ActionError
from relayrl.errors import EnvError
from relayrl.testing.streams import assert_same_streams, next_step_stream, same_step_stream
from relayrl.training.experience import env_setup

needs_envpool = pytest.mark.skipif(not envpool_ids(), reason="the envpool extra is not installed")


def steer(obs, rng, noise):
    """Keeps a pole up (episodes reach the time limit), but for a fraction ``noise`` of random pushes."""
    push = obs[:, 2] + 0.1 * obs[:, 3] > 0
    return (push ^ (rng.random(len(obs)) < noise)).astype(np.int64)


@pytest.mark.parametrize("max_episode_steps, noise, predrawn", [(None, 0.1, 32), (40, 0.3, 3)])
def test_native_cartpole_matches_the_sync_manager_step_for_step(max_episode_steps, noise, predrawn, monkeypatch):
    monkeypatch.setattr(CartPoleAdapter, "PREDRAWN", predrawn)  # 3: the start draws taken ahead run out often
    n, rng = 6, np.random.default_rng(0)
    with make_vec("CartPole-v1", n, manager="sync", max_episode_steps=max_episode_steps) as sync, \
            make_vec("CartPole-v1", n, manager="native", max_episode_steps=max_episode_steps) as native:
        assert isinstance(native, NativeVectorEnv) and native.source == "gymnasium"
        for seed in (3, 11):  # a second reset(seed) re-seeds every env as the single envs do
            obs = sync.reset(seed=seed)
            np.testing.assert_array_equal(native.reset(seed=seed), obs)
            ended = {"terminated": 0, "truncated": 0}
            for _ in range(600):
                actions = steer(obs, rng, noise)
                a, b = sync.step(actions), native.step(actions)
                for field in ("obs", "reward", "terminated", "truncated"):
                    np.testing.assert_array_equal(getattr(b, field), getattr(a, field), err_msg=field)
                done = a.terminated | a.truncated
                np.testing.assert_array_equal(b.final_obs[done], a.final_obs[done])
                assert b.obs.dtype == np.float32 and b.reward.dtype == a.reward.dtype
                ended["terminated"] += int(a.terminated.sum())
                ended["truncated"] += int((a.truncated & ~a.terminated).sum())
                obs = a.obs
            assert ended["terminated"] >= 1 and ended["truncated"] >= 1  # both kinds of ends were compared


def test_native_steps_continue_after_a_reset_without_seed_as_sync_does():
    with make_vec("CartPole-v1", 3, seed=5) as sync, make_vec("CartPole-v1", 3, manager="native", seed=5) as native:
        for _ in range(30):
            sync.step(np.ones(3, np.int64)), native.step(np.ones(3, np.int64))
        np.testing.assert_array_equal(native.reset(), sync.reset())  # the per-env streams go on


def test_env_kwargs_reach_the_native_env_and_bad_ones_are_named():
    with make_vec("CartPole-v1", 4, manager="native", env_kwargs={"sutton_barto_reward": True}, seed=0) as venv:
        rewards = [venv.step(np.zeros(4, np.int64)).reward for _ in range(20)]
    assert set(np.concatenate(rewards).tolist()) <= {0.0, -1.0} and np.concatenate(rewards).min() == -1.0
    with pytest.raises(EnvError, match="rejected its kwargs.*bogus"):
        make_vec("CartPole-v1", 2, manager="native", env_kwargs={"bogus": 1})


def test_actions_are_checked_before_the_step():
    with make_vec("CartPole-v1", 4, manager="native", seed=0) as venv:
        with pytest.raises(ActionError, match="shape"):
            venv.step(np.zeros(3, np.int64))
        with pytest.raises(ActionError, match="out of range"):
            venv.step(np.full(4, 2))
        with pytest.raises(EnvError, match="without a pending send"):
            venv.recv()
        assert venv.stats == {"errors": 0, "restarts": 0, "timeouts": 0}


@pytest.mark.parametrize("kwargs, message", [
    (dict(env_kwargs=[{}, {}]), "per-env env_kwargs"),
    (dict(wrapping={"frame_stack": 2}), "frame_stack=2"),
    (dict(render_mode="rgb_array"), "does not render"),
    (dict(workers=2), "do not apply to the native manager"),
    (dict(step_timeout=5.0), "do not apply to the native manager"),
])
def test_what_the_native_manager_cannot_honour_is_refused(kwargs, message):
    with pytest.raises(EnvError, match=message):
        make_vec("CartPole-v1", 2, manager="native", **kwargs)


def test_envs_without_a_native_implementation_are_refused():
    with pytest.raises(EnvError, match="no native vector implementation.*sync"):
        make_vec("relayrl.testing.envs:relayrl-test/SlowCartPole-v0", 2, manager="native")
    with pytest.raises(EnvError, match="env factory"):
        make_vec(lambda: gym.make("CartPole-v1"), 2, manager="native")


def test_auto_picks_native_when_the_env_has_it_and_nothing_rules_it_out():
    def manager(*sets):
        return env_setup(build_config("ppo", None, list(sets)), on_policy=True)["manager"]

    assert manager("env.id=CartPole-v1") == "native"
    assert manager("env.id=CartPole-v1", "env.kwargs={sutton_barto_reward: true}") == "native"
    assert manager("env.id=CartPole-v1", "env.frame_stack=2") in ("sync", "subproc")
    assert manager("env.id=Pendulum-v1") in ("sync", "subproc")  # Gymnasium's own env, even if EnvPool has one
    assert manager("env.id=CartPole-v1", "env.manager=sync") == "sync"
    assert not picks_native("relayrl.testing.envs:relayrl-test/SlowCartPole-v0")
    args = env_setup(build_config("ppo", None, ["env.manager=native"]), on_policy=True)
    assert "workers" not in args and "step_timeout" not in args


@pytest.mark.parametrize("num_envs", [2, 4])
def test_ppo_on_the_native_manager_learns_exactly_what_it_learns_on_sync(tmp_path, tiny_config, num_envs):
    """Same seeds, same trajectories: a run's metrics (training returns, losses, evaluations) are identical.

    Exact by construction, not by luck: the native CartPole draws and steps every env's state bit for bit
    as the single envs do (per-env generators, the same float64 formulas), both managers hand the policy
    row-major float32 arrays of the same shape, and the learner runs on one torch thread (threads=1), so
    every floating-point operation of the two runs is the same operation on the same bits in the same
    order. (Column-major observations, which the native manager once passed on as CartPoleVectorEnv returns
    them, go through another matrix-product kernel: logits differed in the last bit, losses in the 7th
    digit, with 2 envs on one CPU and 4 on another.)"""
    from relayrl import launch
    from relayrl.io.metrics import read_metrics

    def run(manager):
        config = tiny_config(f"env.manager={manager}", f"env.num_envs={num_envs}", "threads=1", total_steps=320, seed=3)
        launch.run(config, run_dir=tmp_path / manager, tensorboard=False)
        return [{k: v for k, v in e.items() if not k.startswith(("time/", "wall_time"))}
                for e in read_metrics(tmp_path / manager)]

    native, sync = run("native"), run("sync")
    assert native == sync and any(e["event"] == "eval" for e in native)
    assert any("train/return_mean" in e for e in native)  # episodes ended, so autoresets were in the data


def test_native_observations_are_row_major_as_on_every_other_manager():
    env = make_vec("CartPole-v1", 3, manager="native")
    try:
        results = [env.reset(seed=0)]
        for _ in range(30):  # through episode ends (an all-left policy ends them within ~10 steps)
            result = env.step(np.zeros(3, np.int64))
            results += [result.obs, result.final_obs]
    finally:
        env.close()
    assert all(obs.flags.c_contiguous for obs in results)


@needs_envpool
@pytest.mark.filterwarnings("ignore:.*precision lowered")  # EnvPool's float64 Box bounds, in the raw pool here
def test_envpool_same_step_autoreset_equals_its_next_step_stream_without_the_dummy_steps():
    """EnvPool's own NEXT_STEP stream (a step after each end that ignores the action), with those steps
    dropped, is what the native manager returns, env by env: same seeds, same per-env policy."""
    import envpool

    n, steps = 4, 120

    def policy(obs):  # per env, from its observation only
        return (obs[:, 2] > 0).astype(np.int64)

    raw = envpool.make_gymnasium("CartPole-v1", num_envs=n, seed=7, max_episode_steps=25)
    obs, _ = raw.reset()
    expected = next_step_stream(raw, obs, steps + 40, lambda obs, counts: policy(obs))
    raw.close()
    with NativeVectorEnv("CartPole-v1", n, max_episode_steps=25, source="envpool") as venv:
        got = same_step_stream(venv, venv.reset(seed=7), steps, lambda obs, counts: policy(obs))
    assert sum(assert_same_streams(got, expected)) >= 8


@needs_envpool
def test_envpool_only_ids_go_native_under_auto_with_their_stop_value():
    assert picks_native("Pong-v5") and not picks_native("Acrobot-v1")  # Acrobot-v1: Gymnasium's own
    assert native_stop_value("CartPole-v1") == 475.0
    with make_vec("Acrobot-v1", 2, manager="native", seed=0) as venv:  # asked for explicitly: EnvPool's port
        assert venv.source == "envpool" and venv.step(np.zeros(2, np.int64)).obs.shape == (2, 6)


def test_the_cli_refuses_native_for_an_env_without_one_in_one_line(tmp_path, capsys):
    from relayrl.cli import main

    code = main(["train", "ppo", "--env", "relayrl.testing.envs:relayrl-test/SlowCartPole-v0", "--set",
                 "env.manager=native", "--run-dir", str(tmp_path / "run"), "--quiet", "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("relayrl: error:") == 1 and "no native vector implementation" in err, err


def test_auto_decides_for_a_gymnasium_id_without_importing_envpool():
    """Importing envpool costs ~2 s: ``auto`` must not pay it for ids Gymnasium registers."""
    import subprocess
    import sys

    code = ("import sys; from relayrl.envs.native import picks_native; "
            "print(picks_native('Pendulum-v1'), picks_native('CartPole-v1'), 'envpool' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "False"]
