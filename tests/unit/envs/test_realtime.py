"""relayrl.envs.realtime: the elastic clock, action buffer, late steps, truncation, timing and the drone.

Timing assertions are loose on purpose (medians, wide bands, margins of tens of milliseconds): the
suite runs on a loaded 2-core machine. The late-step arithmetic is tested exactly on ElasticClock.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from relayrl.envs.drone import DummyDrone
from relayrl.envs.realtime import (DRONE_ID, ElasticClock, RealTimeConfig, RealTimeEnv, RealTimeInterface,
                                   RealTimeWarning, RunningStat)
from relayrl.envs.registry import make
from relayrl.errors import ConfigError

# a loaded machine can make any step late; the tests about lateness catch the warning themselves
pytestmark = pytest.mark.filterwarnings("ignore::relayrl.envs.realtime.RealTimeWarning")


class Recorder(RealTimeInterface):
    """Records every call with its time; observation k is ``[k, k]`` where k counts the captures."""

    def __init__(self, terminate_at: int | None = None, fail_at: int | None = None):
        self.sends: list[tuple[float, np.ndarray]] = []
        self.captures: list[float] = []
        self.waits = self.closes = 0
        self.terminate_at, self.fail_at = terminate_at, fail_at

    def send_control(self, control):
        self.sends.append((time.perf_counter(), np.array(control)))

    def reset(self, seed=None, options=None):
        return np.full(2, -1.0, np.float32), {"reset": True}

    def get_obs_rew_terminated_info(self):
        self.captures.append(time.perf_counter())
        k = len(self.captures)
        if self.fail_at == k:
            raise OSError("sensor unplugged")
        return np.full(2, k, np.float32), float(k), k == self.terminate_at, {"capture": k}

    def get_observation_space(self):
        return gym.spaces.Box(-1.0, 1e6, (2,), np.float32)

    def get_action_space(self):
        return gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def get_default_action(self):
        return np.zeros(1, np.float32)

    def wait(self):
        self.waits += 1
        super().wait()

    def close(self):
        self.closes += 1


def act(x: float) -> np.ndarray:
    return np.array([x], np.float32)


def make_env(interface=None, **options) -> RealTimeEnv:
    options = {"time_step_duration": 0.02, "start_obs_capture": 0.02, **options}
    return RealTimeEnv(interface or Recorder(), RealTimeConfig(**options))


@pytest.fixture
def no_thread_leak():
    yield
    alive = [t for t in threading.enumerate() if t.name == "relayrl-realtime"]
    assert not alive, f"background threads left running: {alive}"


def test_step_k_sends_its_action_in_time_step_k_and_returns_the_previous_capture(no_thread_leak):
    rec = Recorder()
    env = make_env(rec, time_step_duration=0.04, start_obs_capture=0.01, act_in_obs=False)
    try:
        obs, info = env.reset(seed=0)
        assert obs.tolist() == [-1, -1] and info == {"reset": True}
        for k in range(1, 9):
            obs, reward, *_ , info = env.step(act(k / 10))
            assert obs.tolist() == [k, k] and reward == k and info == {"capture": k}  # captured in step k-1
        env.step(act(0.9))  # joins time step 8, so capture 9 exists
        env.wait()  # joins time step 9, so send 9 exists
    finally:
        env.close()
    # time step 0 (started by reset) applies the default action, time step k the action of step k
    sent = [float(a[0]) for _, a in rec.sends[:10]]
    assert sent == pytest.approx([0.0] + [k / 10 for k in range(1, 10)])
    # capture k happens start_obs_capture into time step k-1: after that step's send, before the next
    send_times = [t for t, _ in rec.sends]
    offsets = []
    for k in range(1, 10):
        capture = rec.captures[k - 1]
        assert send_times[k - 1] < capture < send_times[k]
        offsets.append(capture - send_times[k - 1])
    assert 0.003 <= statistics.median(offsets) <= 0.025  # nominal 0.01 of a 0.04 s step
    assert 0.008 <= env.timing()["obs_capture_offset_mean"] <= 0.03


def test_action_buffer_holds_the_last_actions_in_order():
    env = make_env(act_buf_len=3)
    try:
        assert isinstance(env.observation_space, gym.spaces.Tuple) and len(env.observation_space) == 4
        obs, _ = env.reset()
        assert [float(a[0]) for a in obs[1:]] == [0, 0, 0]
        expected = [[0, 0, 0.1], [0, 0.1, 0.2], [0.1, 0.2, 0.3], [0.2, 0.3, 0.4]]
        for k, want in enumerate(expected, 1):
            obs, *_ = env.step(act(k / 10))
            assert [float(a[0]) for a in obs[1:]] == pytest.approx(want)
            assert obs in env.observation_space
        obs, _ = env.reset()  # reset_act_buf: back to default actions
        assert [float(a[0]) for a in obs[1:]] == [0, 0, 0]
    finally:
        env.close()


@pytest.mark.parametrize("reset_act_buf, last_act_on_reset, want, sent", [
    (True, True, [0, 0, 0.4], 0.4),        # only the newest entry is the previous episode's last action
    (False, True, [0.3, 0.4, 0.4], 0.4),
    (False, False, [0.3, 0.4, 0.0], 0.0),
])
def test_reset_variants_of_the_action_buffer(reset_act_buf, last_act_on_reset, want, sent):
    rec = Recorder()
    env = make_env(rec, act_buf_len=3, reset_act_buf=reset_act_buf, last_act_on_reset=last_act_on_reset)
    try:
        env.reset()
        for k in range(1, 5):
            env.step(act(k / 10))
        obs, _ = env.reset()
        assert [float(a[0]) for a in obs[1:]] == pytest.approx(want)
        env.step(act(0.9))  # joins time step 0, whose send is then recorded
        assert float(rec.sends[5][1][0]) == pytest.approx(sent)  # what time step 0 applied
    finally:
        env.close()


def test_returned_actions_do_not_alias_the_callers_array():
    env = make_env(act_buf_len=2)
    try:
        env.reset()
        action = act(0.5)
        obs, *_ = env.step(action)
        action[:] = -1.0  # relayrl's runner reuses one preallocated action array
        assert float(obs[2][0]) == 0.5
        obs2, *_ = env.step(act(0.1))
        assert float(obs2[1][0]) == 0.5 and obs2[1] is not obs[2]
    finally:
        env.close()


def test_flatten_obs_is_one_float32_box():
    env = make_env(act_buf_len=2, flatten_obs=True)
    try:
        assert env.observation_space == gym.spaces.Box(
            np.array([-1, -1, -1, -1], np.float32), np.array([1e6, 1e6, 1, 1], np.float32), dtype=np.float32)
        env.reset()
        env.step(act(0.25))
        obs, *_ = env.step(act(0.5))
        assert obs.dtype == np.float32 and obs.tolist() == [2, 2, 0.25, 0.5]
    finally:
        env.close()


def test_elastic_clock_keeps_its_grid_until_the_timeout_then_re_anchors():
    clock = ElasticClock(duration=0.1, capture=0.04, timeout=0.1)
    clock.restart(10.0)
    assert (clock.t_start, clock.t_capture, clock.t_end) == (10.0, 10.04, pytest.approx(10.1))
    assert not clock.advance(10.1)                   # on time
    assert clock.t_start == pytest.approx(10.1)
    assert not clock.advance(10.299)                 # 0.099 s late: within the elasticity, grid kept
    assert clock.t_start == pytest.approx(10.2) and clock.t_end == pytest.approx(10.3)
    assert clock.advance(10.45)                      # 0.15 s after the end: late, re-anchored at now
    assert clock.t_start == 10.45 and clock.t_capture == pytest.approx(10.49)


def test_late_step_warns_re_anchors_and_is_counted():
    env = make_env()
    try:
        env.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RealTimeWarning)
            for _ in range(3):
                env.step(act(0))
        time.sleep(0.15)  # timeout is 0.02 x 1.0 after the end of the step: far exceeded
        before = time.perf_counter()
        with pytest.warns(RealTimeWarning, match="time step timed out"):
            env.step(act(0))
        assert env.timing()["late_steps"] == 1
        assert env._clock.t_start >= before  # anchored on the late call, not on the old grid
    finally:
        env.close()


def test_a_caller_within_the_elasticity_does_not_warn():
    env = make_env(time_step_timeout_factor=10.0)  # 0.2 s of slack: only a huge stall would warn
    try:
        env.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RealTimeWarning)
            for k in range(8):
                if k % 2:
                    time.sleep(0.03)  # longer than a time step, shorter than the timeout
                env.step(act(0))
        assert env.timing()["late_steps"] == 0
    finally:
        env.close()


def test_truncation_at_ep_max_length_and_wait_on_done():
    rec = Recorder()
    env = make_env(rec, ep_max_length=3, wait_on_done=True)
    try:
        env.reset()
        flags = [env.step(act(0.5))[2:4] for _ in range(3)]
        assert flags == [(False, False), (False, False), (False, True)]
        assert rec.waits == 1 and float(rec.sends[-1][1][0]) == 0.0  # wait() sends the default action
        with pytest.raises(RuntimeError, match="call reset"):
            env.step(act(0))
    finally:
        env.close()


def test_termination_calls_wait_only_with_wait_on_done():
    for wait_on_done in (True, False):
        rec = Recorder(terminate_at=2)
        env = make_env(rec, wait_on_done=wait_on_done, ep_max_length=10)
        try:
            env.reset()
            assert env.step(act(0.5))[2:4] == (False, False)
            assert env.step(act(0.5))[2:4] == (True, False)
            assert rec.waits == int(wait_on_done)
        finally:
            env.close()


def test_interface_errors_surface_in_the_callers_thread():
    env = make_env(Recorder(fail_at=2))
    try:
        env.reset()
        env.step(act(0))
        with pytest.raises(OSError, match="sensor unplugged"):
            env.step(act(0))
        env.reset()  # the env stays usable
    finally:
        env.close()


@pytest.mark.parametrize("options, field", [
    ({"time_step_duration": 0.05, "start_obs_capture": 0.06}, "start_obs_capture"),
    ({"time_step_duration": -0.1, "start_obs_capture": 0.0}, "time_step_duration"),
    ({"time_step_duration": 0.0}, "time_step_duration"),
    ({"act_buf_len": -1}, "act_buf_len"),
    ({"ep_max_length": 0}, "ep_max_length"),
    ({"time_step_timeout_factor": -1.0}, "time_step_timeout_factor"),
    ({"time_step_duration": float("nan")}, "time_step_duration"),
    ({"wait_on_done": "yes"}, "wait_on_done"),
])
def test_bad_config_is_a_config_error_naming_the_field(options, field):
    with pytest.raises(ConfigError, match=field):
        RealTimeConfig(**options)


def test_config_messages_say_how_to_fix():
    with pytest.raises(ConfigError, match="between 0 and time_step_duration=0.05; set it to time_step_duration"):
        RealTimeConfig(start_obs_capture=0.1)
    with pytest.raises(ConfigError, match="did you mean 'time_step_duration'"):
        RealTimeConfig.from_kwargs(time_step_durration=0.1)


def test_close_stops_the_thread_even_mid_step(no_thread_leak):
    rec = Recorder()
    env = make_env(rec, time_step_duration=5.0, start_obs_capture=5.0)
    env.reset()
    thread = env._thread
    assert thread.is_alive()
    start = time.perf_counter()
    env.close()
    assert time.perf_counter() - start < 2.0  # the 5 s sleep was cut short
    assert not thread.is_alive() and rec.closes == 1
    env.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_timing_reports_plausible_numbers():
    env = make_env(time_step_timeout_factor=5.0)
    try:
        assert math.isnan(env.timing()["step_duration_mean"])
        env.reset()
        for _ in range(15):
            env.step(act(0))
        stats = env.timing()
        assert stats["steps"] == 15 and stats["late_steps"] == 0 and stats["episodes"] == 1
        assert 0.5 * 0.02 <= stats["step_duration_mean"] <= 3 * 0.02
        assert 0 <= stats["jitter"] <= stats["jitter_max"] + 1e-12
        for key in ("step_duration_std", "obs_capture_offset_mean", "inference_mean", "wait_mean"):
            assert math.isfinite(stats[key]) and stats[key] >= 0, key
        assert stats["wait_mean"] > stats["inference_mean"]  # this caller does nothing between steps
    finally:
        env.close()


def test_running_stat_matches_numpy():
    data = np.random.default_rng(0).normal(3.0, 2.0, 1000)
    stat = RunningStat()
    for x in data:
        stat.add(float(x))
    assert stat.count == 1000 and stat.mean == pytest.approx(data.mean()) and stat.std == pytest.approx(data.std())
    assert (stat.max, stat.min) == (data.max(), data.min())


def test_drone_integrates_wall_time():
    now = [0.0]
    drone = DummyDrone(target=1.5, clock=lambda: now[0])
    obs, _ = drone.reset(seed=0)
    assert obs.tolist() == [0, 0, 1.5]
    drone.send_control(np.array([1.0]))
    now[0] = 1.0
    obs, reward, terminated, _ = drone.get_obs_rew_terminated_info()
    assert obs.tolist() == pytest.approx([0.5, 1.0, 1.5]) and reward == pytest.approx(-1.0) and not terminated
    drone.send_control(np.array([9.0]))  # clipped to max_accel=2
    now[0] = 3.0
    obs, _, terminated, _ = drone.get_obs_rew_terminated_info()
    assert drone.position == pytest.approx(0.5 + 2.0 + 4.0) and terminated  # beyond bound=5
    assert obs[0] == 5.0  # clipped into the observation space
    targets = {float(DummyDrone().reset(seed=s)[0][2]) for s in (1, 1)}
    assert len(targets) == 1  # the random target is seeded


def test_registered_drone_works_through_relayrl_make(no_thread_leak):
    env = make(f"relayrl.envs.realtime:{DRONE_ID}", time_step_duration=0.01, act_buf_len=2, target=1.0)
    try:
        assert env.observation_space.shape == (3 + 2,) and env.observation_space.dtype == np.float32
        obs, _ = env.reset(seed=0)
        assert obs[2] == 1.0
        for _ in range(5):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert obs in env.observation_space and reward <= 0
        assert "*" in env.unwrapped.render()
    finally:
        env.close()
    with pytest.raises(ConfigError, match="did you mean 'act_buf_len'"):
        make(DRONE_ID, act_buf_lenn=2)


def test_registered_drone_passes_the_gymnasium_env_checker(no_thread_leak):
    env = make(DRONE_ID)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*symmetric and normalized space")
            check_env(env.unwrapped)
    finally:
        env.close()
