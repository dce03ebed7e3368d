"""Every manager steps the same trajectories; faults are contained; bad actions are refused."""

import os
import time

import gymnasium as gym
import numpy as np
import pytest

import relayrl.testing.envs  # noqa: F401  (registers the test envs in this process)
from relayrl.envs import make_vec
from relayrl.envs.runner import EnvFailure
from relayrl.envs.vector import ActionError
from relayrl.errors import EnvError

FAULTY = "relayrl.testing.envs:relayrl-test/Faulty-v0"
DICT_OBS = "relayrl.testing.envs:relayrl-test/DictObs-v0"


def rollout(venv, steps, seed=0):
    rng = np.random.default_rng(seed)
    out = [venv.reset(seed=7)]
    for _ in range(steps):
        r = venv.step(rng.integers(0, 2, venv.num_envs))
        done = r.terminated | r.truncated
        out.append((r.obs, r.reward, r.terminated, r.truncated, r.final_obs[done], r.env_ids))
    return out


@pytest.mark.parametrize("manager, options", [("subproc", {"workers": 2}), ("subproc", {"workers": 3}),
                                              ("async", {"workers": 2, "wait_num": 6})])
def test_managers_match_sync_step_for_step(manager, options):
    with make_vec("CartPole-v1", 6, max_episode_steps=9) as sync, \
            make_vec("CartPole-v1", 6, max_episode_steps=9, manager=manager, **options) as other:
        a, b = rollout(sync, 40), rollout(other, 40)
    ends = sum(int(step[3].sum()) for step in a[1:])
    assert ends >= 20  # autoreset boundaries (time limit at 9) are part of what is compared
    for x, y in zip(a, b):
        for u, v in zip(x if isinstance(x, tuple) else (x,), y if isinstance(y, tuple) else (y,)):
            np.testing.assert_array_equal(u, v)


def test_dict_observations_round_trip_through_shared_memory():
    keep = {"pack_dict": False}  # (relayrl.envs.make packs Dicts into one row: tests/unit/envs/test_packed.py)
    with make_vec(DICT_OBS, 4, wrapping=keep) as sync, \
            make_vec(DICT_OBS, 4, manager="subproc", workers=2, wrapping=keep) as sub:
        o1, o2 = sync.reset(seed=3), sub.reset(seed=3)
        for _ in range(10):
            actions = np.full((4, 2), 0.25, np.float32)
            r1, r2 = sync.step(actions), sub.step(actions)
        for obs1, obs2 in ((o1, o2), (r1.obs, r2.obs), (r1.final_obs, r2.final_obs)):
            assert set(obs2) == {"pos", "mode", "nested"}
            np.testing.assert_array_equal(obs1["pos"], obs2["pos"])
            assert obs2["pos"].dtype == np.float64 and obs2["pos"].shape == (4, 3)
            np.testing.assert_array_equal(obs1["mode"], obs2["mode"])
            assert obs2["nested"][0].dtype == np.int8 and obs2["nested"][1].shape == (4, 2)
            np.testing.assert_array_equal(obs1["nested"][1], obs2["nested"][1])
        assert r2.info == r1.info and r2.info[0] == {"t": 3}  # info dicts travel too (episodes of 7)


def test_async_returns_ready_envs_first_and_every_env_exactly_once():
    # envs 2 and 3 (worker 1) sleep 0.4 s on their 2nd step; worker 0 keeps stepping meanwhile
    kwargs = [{}, {}, {"hang_at": 2, "hang_s": 0.4}, {"hang_at": 2, "hang_s": 0.4}]
    with make_vec(FAULTY, 4, manager="async", workers=2, env_kwargs=kwargs, seed=0) as venv:
        returned = {0: 0, 1: 0, 2: 0, 3: 0}
        pending: set[int] = set()
        ids = np.arange(4)
        start = time.monotonic()
        while returned[2] < 2 and time.monotonic() - start < 10:
            venv.send(np.zeros(len(ids), np.int64))
            pending |= set(ids.tolist())
            result = venv.recv()
            ids = result.env_ids
            assert len(set(ids.tolist())) == len(ids) and set(ids.tolist()) <= pending  # never twice per send
            pending -= set(ids.tolist())
            for env_id in ids:
                returned[int(env_id)] += 1
        assert returned[2] == returned[3] == 2
        assert returned[0] >= 4  # the fast worker was served while the slow one slept
        with pytest.raises(EnvError, match="send\\(\\) called twice"):
            venv.send(np.zeros(len(ids), np.int64))
            venv.send(np.zeros(len(ids), np.int64))


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_exception_in_one_env_truncates_only_that_episode(manager):
    kwargs = [{"tag": k, **({"raise_at": 3} if k == 1 else {})} for k in range(4)]
    with make_vec(FAULTY, 4, manager=manager, env_kwargs=kwargs, seed=0, **(
            {"workers": 2} if manager != "sync" else {})) as venv:
        for _ in range(2):
            r = venv.step(np.zeros(4, np.int64))
        r = venv.step(np.zeros(4, np.int64))
        assert list(r.truncated) == [False, True, False, False]
        assert "injected failure at step 3" in r.info[1]["env_error"] and "Traceback" in r.info[1]["env_error"]
        np.testing.assert_array_equal(r.final_obs[1], [1, 2])  # the last good observation
        np.testing.assert_array_equal(r.obs[1], [1, 0])  # rebuilt and reset
        np.testing.assert_array_equal(r.obs[:, 1][[0, 2, 3]], [3, 3, 3])  # others kept stepping
        assert venv.stats["errors"] == 1
        r = venv.step(np.zeros(4, np.int64))
        assert not r.truncated.any()


def test_dead_worker_is_respawned_and_its_episodes_truncated():
    kwargs = [{"tag": k, **({"exit_at": 2} if k == 3 else {})} for k in range(4)]
    with make_vec(FAULTY, 4, manager="subproc", workers=2, env_kwargs=kwargs, seed=0) as venv:
        old = venv.pids
        venv.step(np.zeros(4, np.int64))
        r = venv.step(np.zeros(4, np.int64))
        assert list(r.truncated) == [False, False, True, True]  # both envs of the dead worker
        assert "died" in r.info[3]["env_error"]
        np.testing.assert_array_equal(r.final_obs[2], [2, 1])
        assert venv.stats["restarts"] == 1 and venv.pids[0] == old[0] and venv.pids[1] != old[1]
        r = venv.step(np.zeros(4, np.int64))
        np.testing.assert_array_equal(r.obs[:, 1], [3, 3, 1, 1])


def test_hung_step_is_killed_after_step_timeout():
    kwargs = [{}, {"hang_at": 2, "hang_s": 30}]
    with make_vec(FAULTY, 2, manager="subproc", workers=2, env_kwargs=kwargs, seed=0, step_timeout=0.5) as venv:
        venv.step(np.zeros(2, np.int64))
        start = time.monotonic()
        r = venv.step(np.zeros(2, np.int64))
        assert time.monotonic() - start < 10
        assert list(r.truncated) == [False, True] and "timed out" in r.info[1]["env_error"]
        assert venv.stats["timeouts"] == 1 and venv.stats["restarts"] == 1


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_an_env_that_keeps_failing_raises_instead_of_looping(manager):
    with pytest.raises(EnvFailure, match="failed .* times in a row"):
        make_vec(FAULTY, 2, manager=manager, env_kwargs={"fail_reset": True}, seed=0, max_restarts=2)


@pytest.mark.parametrize("manager", ["sync", "subproc"])
def test_bad_actions_raise_before_anything_is_sent(manager):
    with make_vec("CartPole-v1", 2, manager=manager, seed=0) as venv:
        for bad, match in ((np.zeros(3, np.int64), "shape"), (np.zeros(2, np.float32), "dtype"),
                           (np.array([0, 2]), "out of range"), (np.array([-1, 0]), "out of range")):
            with pytest.raises(ActionError, match=match):
                venv.send(bad)
            assert issubclass(ActionError, ValueError)
        r = venv.step(np.array([0, 1]))  # nothing was left pending by the refused sends
        assert r.obs.shape == (2, 4)
    with make_vec("Pendulum-v1", 2, seed=0) as venv:
        with pytest.raises(ActionError, match="NaN"):
            venv.send(np.full((2, 1), np.nan, np.float32))


def test_make_vec_option_errors():
    with pytest.raises(EnvError, match="unknown env manager 'threads'"):
        make_vec("CartPole-v1", 2, manager="threads")
    with pytest.raises(EnvError, match="wait_num applies to the async manager"):
        make_vec("CartPole-v1", 2, manager="subproc", wait_num=1)
    with pytest.raises(EnvError, match="not a lambda"):
        make_vec(lambda: gym.make("CartPole-v1"), 2, manager="subproc", workers=2)
    with pytest.raises(EnvError, match="one per env"):
        make_vec("CartPole-v1", 2, env_kwargs=[{}])


def test_close_leaves_no_processes_and_no_shared_memory():
    venv = make_vec("CartPole-v1", 4, manager="subproc", workers=2, seed=0)
    pids, name = venv.pids, venv._shm.name
    assert os.path.exists(f"/dev/shm/{name}")
    venv.close()
    venv.close()  # idempotent
    assert not os.path.exists(f"/dev/shm/{name}")
    for pid in pids:
        assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def test_a_worker_killed_from_outside_is_respawned():
    with make_vec(FAULTY, 4, manager="subproc", workers=2, seed=0) as venv:
        venv.step(np.zeros(4, np.int64))
        os.kill(venv.pids[0], 9)
        r = venv.step(np.zeros(4, np.int64))
        assert list(r.truncated) == [True, True, False, False] and "died" in r.info[0]["env_error"]
        assert venv.stats["restarts"] == 1
        assert not venv.step(np.zeros(4, np.int64)).truncated.any()
