"""The native manager on ALE ids: ale-py's own C++ vector env under relayrl's same-step contract."""

import time

import numpy as np
import pytest

from relayrl.config import build_config
from relayrl.envs import make_vec
from relayrl.envs.native import NativeVectorEnv, picks_native
from relayrl.errors import EnvError
from relayrl.testing.streams import assert_same_streams, next_step_stream, same_step_stream
from relayrl.training.experience import env_setup

pytest.importorskip("ale_py.vector_env")

PONG = "ALE/Pong-v5"
NOOP = 0


def first_frames(obs):
    """Whether every env's newest frame shows something (Pong's screen is never all black)."""
    return bool(obs[:, -1].reshape(len(obs), -1).any(axis=1).all())


@pytest.mark.parametrize("frame_stack", [None, 1, 2])
def test_spaces_and_arrays_are_the_sync_managers(frame_stack):
    wrapping = {"frame_stack": frame_stack}
    with make_vec(PONG, 2, manager="sync", wrapping=wrapping, seed=0) as sync, \
            make_vec(PONG, 2, manager="native", wrapping=wrapping, seed=0) as native:
        assert isinstance(native, NativeVectorEnv) and native.source == "ale"
        assert native.single_observation_space == sync.single_observation_space
        assert native.single_action_space == sync.single_action_space
        a, b = sync.step(np.ones(2, np.int64)), native.step(np.ones(2, np.int64))
        for field in ("obs", "reward", "terminated", "truncated", "final_obs"):
            x, y = getattr(a, field), getattr(b, field)
            assert (y.dtype, y.shape) == (x.dtype, x.shape), field
        assert b.obs.flags.c_contiguous and native.single_observation_space.contains(b.obs[0])


@pytest.mark.parametrize("options, steps", [
    (dict(max_episode_steps=40), 10),  # ALE's frame limit: 40 frames of the agent's steps, 4 a step
    (dict(env_kwargs={"max_num_frames_per_episode": 48}), 12),
    (dict(max_episode_steps=80, env_kwargs={"max_num_frames_per_episode": 48}), 12),  # the smaller of both
])
def test_episodes_end_and_restart_on_the_same_step_with_no_dummy_step(options, steps):
    """Every episode lasts exactly ``steps`` steps (a NEXT_STEP dummy step would make the second one longer by
    one), the step that ends one returns its last frame in final_obs and the new episode's first observation
    (one frame after zeros, as after reset) in obs, and the step after it goes on from that observation."""
    n = 3
    with make_vec(PONG, n, manager="native", seed=0, **options) as venv:
        obs = venv.reset(seed=0)
        assert not obs[:, :-1].any() and first_frames(obs)  # a reset's stack: the first frame after zeros
        ends = []
        for t in range(3 * steps):
            r = venv.step(np.full(n, NOOP))
            assert not r.terminated.any()
            if r.truncated.any():
                assert r.truncated.all()  # (the same length for every env)
                ends.append(t + 1)
                np.testing.assert_array_equal(r.final_obs[:, :-1], obs[:, 1:])  # the ended episode's next frame
                assert not np.array_equal(r.final_obs, r.obs)
                assert not r.obs[:, :-1].any() and first_frames(r.obs)  # the new episode's first observation
            else:
                np.testing.assert_array_equal(r.obs[:, :-1], obs[:, 1:])  # a real step from the last observation
            obs = r.obs
    assert ends == [steps, 2 * steps, 3 * steps]


def test_no_frame_limit_means_no_truncation():
    with make_vec(PONG, 2, manager="native", env_kwargs={"max_num_frames_per_episode": None}, seed=0) as venv:
        assert not any(venv.step(np.zeros(2, np.int64)).truncated.any() for _ in range(50))


def test_the_same_step_stream_is_ales_next_step_stream_without_the_dummy_steps():
    """ALE's own NEXT_STEP stream (after each end, a step that ignores its action and returns the reset
    observation), with those steps dropped, is what the native manager returns, env by env: same seed, each
    env's action a function of its own step count, episodes cut at 120 frames (30 steps)."""
    from ale_py.vector_env import AtariVectorEnv

    n, steps = 3, 100
    raw = AtariVectorEnv("pong", n, num_threads=1, max_num_frames_per_episode=120, repeat_action_probability=0.25,
                         reward_clipping=False, use_fire_reset=False)
    obs, _ = raw.reset(seed=7)
    expected = next_step_stream(raw, obs, steps + 10, lambda obs, counts: counts % 6)
    raw.close()
    with make_vec(PONG, n, manager="native", threads=1, env_kwargs={"max_num_frames_per_episode": 120}) as venv:
        got = same_step_stream(venv, venv.reset(seed=7), steps, lambda obs, counts: counts % 6)
    _, truncations = assert_same_streams(got, expected)
    assert truncations == 3 * n


def test_the_same_seed_gives_the_same_trajectories():
    def trajectory(seed):
        rng = np.random.default_rng(0)
        with make_vec(PONG, 2, manager="native", max_episode_steps=120) as venv:
            out = [venv.reset(seed=seed)]
            for _ in range(45):  # through an episode end (30 steps) and its no-op restart
                r = venv.step(rng.integers(0, 6, 2))
                out += [r.obs, r.reward, r.truncated, r.final_obs]
        return out

    first, again, other = trajectory(5), trajectory(5), trajectory(6)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_send_starts_the_step_and_recv_collects_it():
    """send() returns while ALE's thread steps (6 envs on 1 thread: about a millisecond a step), recv() waits for it;
    what they give is what step() gives on a twin seeded alike."""
    rng = np.random.default_rng(1)
    actions = [rng.integers(0, 6, 6) for _ in range(20)]
    with make_vec(PONG, 6, manager="native", threads=1, seed=2) as split, \
            make_vec(PONG, 6, manager="native", threads=1, seed=2) as whole:
        sends, recvs = [], []
        for a in actions:
            start = time.perf_counter()
            assert split.send(a) is None
            sent = time.perf_counter()
            r = split.recv()
            sends.append(sent - start), recvs.append(time.perf_counter() - sent)
            expected = whole.step(a)
            np.testing.assert_array_equal(r.obs, expected.obs)
            np.testing.assert_array_equal(r.reward, expected.reward)
        split.send(actions[0])
        with pytest.raises(EnvError, match="send.. called again before recv"):
            split.send(actions[0])
        split.recv()
        with pytest.raises(EnvError, match="without a pending send"):
            split.recv()
    assert np.median(sends) < np.median(recvs)  # the step ran after send had returned


def test_a_step_sent_and_never_collected_does_not_block_reset_or_close():
    with make_vec(PONG, 2, manager="native", seed=0) as venv:
        venv.send(np.zeros(2, np.int64))
        obs = venv.reset(seed=0)
        assert not obs[:, :-1].any()
        venv.send(np.zeros(2, np.int64))  # closed by the with, the step in flight


def test_threads_default_to_one_per_core_and_can_be_set():
    import os

    with make_vec(PONG, 3, manager="native") as venv:
        assert venv.backend.threads == min(3, os.cpu_count())
    with make_vec(PONG, 3, manager="native", threads=1) as venv:
        assert venv.backend.threads == 1


def test_env_kwargs_reach_the_ale_vector_env():
    with make_vec(PONG, 2, manager="native", env_kwargs={"full_action_space": True}) as venv:
        assert venv.single_action_space.n == 18
    with make_vec(PONG, 2, manager="sync", env_kwargs={"full_action_space": True}) as venv:
        assert venv.single_action_space.n == 18


@pytest.mark.parametrize("options, message", [
    (dict(env_kwargs={"mode": 1}), "env.kwargs mode .*use manager sync or subproc"),
    (dict(env_kwargs={"difficulty": 1}), "env.kwargs difficulty .*use manager sync or subproc"),
    (dict(env_kwargs={"frameskip": 2}), "env.kwargs frameskip .*use manager sync or subproc"),
    (dict(wrapping={"atari_preprocessing": False}), "Atari preprocessing: for raw frames use manager sync or sub"),
    (dict(wrapping={"resize": [64, 64]}), "no wrappers \\(env.resize=.*use manager sync or subproc"),
    (dict(wrapping={"grayscale": True}), "no wrappers \\(env.grayscale.*use manager sync or subproc"),
    (dict(env_kwargs=[{}, {}]), "per-env env_kwargs need manager sync or subproc"),
    (dict(render_mode="rgb_array"), "does not render.*use manager sync"),
    (dict(workers=2), "do not apply to the native manager"),
])
def test_what_ale_vector_env_cannot_honour_is_refused(options, message):
    with pytest.raises(EnvError, match=message):
        make_vec(PONG, 2, manager="native", **options)


def test_auto_picks_ale_vector_env_for_ale_ids_when_nothing_rules_it_out():
    def manager(*sets):
        return env_setup(build_config("ppo", None, ["env.num_envs=2", *sets]), on_policy=True)["manager"]

    assert manager(f"env.id={PONG}") == "native"
    assert manager(f"env.id={PONG}", "env.frame_stack=2") == "native"
    assert manager(f"env.id={PONG}", "env.kwargs={repeat_action_probability: 0.0}") == "native"
    assert manager(f"env.id={PONG}", "env.kwargs={mode: 1}") in ("sync", "subproc")
    assert manager(f"env.id={PONG}", "env.atari_preprocessing=false") in ("sync", "subproc")
    assert manager(f"env.id={PONG}", "env.resize=[64, 64]") in ("sync", "subproc")
    assert manager(f"env.id={PONG}", "env.manager=subproc") == "subproc"
    assert picks_native(PONG, {}, {"frame_stack": None})
