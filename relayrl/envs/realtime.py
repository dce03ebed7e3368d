"""Real-time Gymnasium environments: ``step`` is clocked by wall time, as a robot's controller is.

A simulator waits for the agent; a robot does not. While the policy computes its next action the
world keeps moving under the action sent last, so the time an action takes to compute is part of
the problem. This module gives such systems the timing of rtgym (the library TMRL runs on), written
afresh: the user implements a small :class:`RealTimeInterface` (send a control, capture an
observation) and :class:`RealTimeEnv` turns it into a Gymnasium env with an *elastic clock*:

* each time step lasts ``time_step_duration`` of wall time; a background thread sends the step's
  action when it starts, captures the observation ``start_obs_capture`` after the step's start,
  and marks the step finished at its end;
* ``step(a)`` waits for the running time step to end, starts the next one with ``a`` and returns at
  once with the observation captured during the step that just ended, so the policy computes the
  next action *while* ``a`` acts;
* a caller that comes back within ``time_step_duration * time_step_timeout_factor`` after the end
  of a step keeps the clock on its grid; one later than that re-anchors the clock at "now", counts
  a late step and warns with :class:`RealTimeWarning`.

Between two ``step`` calls the last action sent keeps applying: that is the physics of a real
device, not a bug to hide. Make the policy fast (or train in another process) rather than the time
step long. ``docs/realtime.md`` has the timing diagram; ``relayrl/envs/drone.py`` a worked example.
"""

from __future__ import annotations

import copy
import math
import threading
import time
import warnings
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.envs.rtparts import (ElasticClock, RealTimeConfig, RealTimeInterface,  # noqa: F401 (re-exported)
                                  RealTimeWarning, RunningStat)

DRONE_ID = "relayrl/RealTimeDrone-v0"


OVERRUN_TOLERANCE = 0.05  # a time step this much longer than nominal counts as an overrun

class RealTimeEnv(gym.Env):
    """A Gymnasium env whose steps last ``config.time_step_duration`` of wall time (see module docstring).

    Args:
        interface: the device.
        config: timing options (default: rtgym's defaults).
    """

    metadata = {"render_modes": []}

    def __init__(self, interface: RealTimeInterface, config: RealTimeConfig | None = None):
        self.interface, self.config = interface, config or RealTimeConfig()
        cfg = self.config
        self.action_space = interface.get_action_space()
        inner = interface.get_observation_space()
        parts = list(inner.spaces) if isinstance(inner, gym.spaces.Tuple) else [inner]
        self._spread = isinstance(inner, gym.spaces.Tuple)
        self._parts_space = gym.spaces.Tuple(parts + [self.action_space] * cfg.act_buf_len) if cfg.act_in_obs else inner
        self.observation_space = self._parts_space
        if cfg.flatten_obs:
            flat = gym.spaces.flatten_space(self._parts_space)
            self.observation_space = gym.spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32),
                                                    dtype=np.float32)
        self._default = interface.get_default_action()
        self._last_action = self._copy_action(self._default)
        self._act_buf: deque = deque(maxlen=cfg.act_buf_len)
        self._clock = ElasticClock(cfg.time_step_duration, cfg.start_obs_capture,
                                   cfg.time_step_duration * cfg.time_step_timeout_factor)
        # the background thread: _go starts one time step, _idle says none is running, _stop ends it
        self._go, self._idle, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._job = self._result = self._error = None
        self._closed, self._done, self._waiting = False, True, False  # step() before reset() is an error
        self._ep_steps = 0
        self._last_launch: float | None = None
        self._returned_at: float | None = None
        self._lock = threading.Lock()  # guards the statistics, written by both threads
        self._stats = {k: RunningStat() for k in ("duration", "deviation", "capture", "inference", "wait")}
        self._overruns = 0  # time steps longer than nominal by more than OVERRUN_TOLERANCE
        self._steps = self._late = self._episodes = 0

    # --- Gymnasium API -------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Wait for the running time step, reset the device, restart the clock and start time step 0.

        Time step 0 applies the default action (the previous episode's last one with
        ``last_act_on_reset``); the first ``step`` returns the observation it captured.
        """
        super().reset(seed=seed)
        self._join()
        obs, info = self.interface.reset(seed=seed, options=options)
        newest = self._last_action if self.config.last_act_on_reset else self._default
        if self.config.reset_act_buf:
            self._act_buf.extend(self._copy_action(self._default) for _ in range(self.config.act_buf_len))
        self._act_buf.append(self._copy_action(newest))
        self._done, self._waiting, self._ep_steps = False, False, 0
        self._episodes += 1
        now = time.perf_counter()
        self._clock.restart(now)
        self._last_launch = None  # a reset breaks the chain of step durations
        self._launch(self._copy_action(newest), now)
        self._returned_at = time.perf_counter()
        return self._observe(obs), dict(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Wait for the running time step to end, start the next one with ``action``, return at once.

        The observation returned was captured ``start_obs_capture`` into the time step that just
        ended (its action buffer already ends with ``action``); ``action`` acts until the next call.
        """
        called = time.perf_counter()
        if self._done:
            raise RuntimeError("the episode is over (or reset() was never called): call reset() before step()")
        self._join()
        joined = time.perf_counter()
        action = self._copy_action(action)
        self._act_buf.append(action)
        self._last_action = action
        self._ep_steps += 1
        obs, reward, terminated, info = self._result
        truncated = not terminated and self.config.ep_max_length is not None \
            and self._ep_steps >= self.config.ep_max_length
        with self._lock:
            self._steps += 1
            self._stats["wait"].add(joined - called)
            if self._returned_at is not None:
                self._stats["inference"].add(called - self._returned_at)
        if terminated or truncated:
            self._done = True
            if self.config.wait_on_done:
                self.wait()
        else:
            self._start_next(self._copy_action(action), joined)
        out = self._observe(obs)
        self._returned_at = time.perf_counter()
        return out, float(reward), bool(terminated), bool(truncated), dict(info)

    def wait(self) -> None:
        """Hold the device (``interface.wait()``); the next time step re-anchors the clock without a warning."""
        self._join()
        self._waiting = True
        self.interface.wait()

    def render(self) -> Any:
        """The interface's ``render()`` (called from the caller's thread, while a time step may run)."""
        return self.interface.render()

    def close(self) -> None:
        """Stop the background thread (cutting its current sleep short) and close the interface."""
        if self._closed:
            return
        self._closed = self._done = True
        self._stop.set()
        self._go.set()
        if self._thread is not None:
            self._thread.join()
        self.interface.close()

    def timing(self) -> dict[str, float]:
        """Wall-clock statistics since the env was made (all durations in seconds).

        ``step_duration_*``: real time between the starts of consecutive time steps of an episode
        (nominal: ``time_step_duration``). ``jitter``: root mean square of (step duration − nominal),
        bias and spread together; ``jitter_max``: the largest absolute deviation. ``obs_capture_offset_*``:
        capture time minus the step's scheduled start (nominal: ``start_obs_capture``).
        ``inference_*``: time the caller spent between ``step`` calls (computing actions, learning).
        ``wait_mean``: time ``step`` blocked on the running time step (near 0: the caller is the
        bottleneck). ``overruns``: time steps longer than nominal by more than 5% (``overrun_share``: of all
        timed steps).
        """
        with self._lock:
            s = self._stats
            dur, cap, inf, wait = (s[k].summary() for k in ("duration", "capture", "inference", "wait"))
            d, dur_count = s["deviation"], s["duration"].count
            jitter = math.sqrt(d.std ** 2 + d.mean ** 2) if d.count else math.nan
            jitter_max = max(abs(d.max), abs(d.min)) if d.count else math.nan
            return {"steps": self._steps, "late_steps": self._late, "episodes": self._episodes,
                    "overruns": self._overruns, "overrun_share": self._overruns / dur_count if dur_count else math.nan,
                    "time_step_duration": self.config.time_step_duration,
                    "step_duration_mean": dur[0], "step_duration_std": dur[1], "step_duration_max": dur[2],
                    "jitter": jitter, "jitter_max": jitter_max,
                    "obs_capture_offset_mean": cap[0], "obs_capture_offset_std": cap[1],
                    "inference_mean": inf[0], "inference_max": inf[2], "wait_mean": wait[0]}

    # --- internals -----------------------------------------------------------------------------

    def _start_next(self, action: Any, now: float) -> None:
        late, waited, self._waiting = self._clock.advance(now), self._waiting, False
        if late and not waited:  # after wait() the gap is a deliberate pause, not a slow learner
            with self._lock:
                self._late += 1
            warnings.warn("time step timed out: the caller came back later than time_step_duration x "
                          "(1 + time_step_timeout_factor) after the previous step started, so the clock was "
                          "re-anchored (the last action applied meanwhile); see env.timing()['late_steps']",
                          RealTimeWarning, stacklevel=3)
        self._launch(action, now)

    def _launch(self, action: Any, now: float) -> None:
        if self._closed:
            raise RuntimeError("the env is closed")
        if self._last_launch is not None:
            duration = now - self._last_launch
            with self._lock:
                self._stats["duration"].add(duration)
                self._stats["deviation"].add(duration - self.config.time_step_duration)
                if duration > self.config.time_step_duration * (1 + OVERRUN_TOLERANCE):
                    self._overruns += 1
        self._last_launch = now
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="relayrl-realtime", daemon=True)
            self._thread.start()
        self._job = (action, self._clock.t_start, self._clock.t_capture, self._clock.t_end)
        self._idle.clear()
        self._go.set()

    def _run(self) -> None:
        """The background thread: one time step per ``_go``, until ``close()``."""
        while True:
            self._go.wait()
            self._go.clear()
            if self._stop.is_set():
                self._idle.set()
                return
            action, t_start, t_capture, t_end = self._job
            try:
                self.interface.send_control(action)
                self._sleep_until(t_capture)
                if not self._stop.is_set():  # close() cut the sleep short: the device may be going away
                    captured = time.perf_counter()
                    self._result = self.interface.get_obs_rew_terminated_info()
                    with self._lock:
                        self._stats["capture"].add(captured - t_start)
                    self._sleep_until(t_end)
            except BaseException as exc:  # re-raised in the caller's thread by _join
                self._error = exc
            self._idle.set()

    def _sleep_until(self, deadline: float) -> None:
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            self._stop.wait(remaining)  # a sleep that close() cuts short

    def _join(self) -> None:
        if self._closed:
            raise RuntimeError("the env is closed")
        self._idle.wait()
        if self._error is not None:
            error, self._error = self._error, None
            self._done = True
            raise error

    def _copy_action(self, action: Any) -> Any:
        # callers reuse their action arrays (relayrl's runner writes into one preallocated array),
        # and the background thread and the observations must not see them change
        space = self.action_space
        if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
            return np.array(action, dtype=space.dtype).reshape(space.shape)
        return copy.deepcopy(action)

    def _observe(self, obs: Any) -> Any:
        if self.config.act_in_obs:
            parts = list(obs) if self._spread else [obs]
            obs = tuple(parts + [self._copy_action(a) for a in self._act_buf])
        if self.config.flatten_obs:
            return gym.spaces.flatten(self._parts_space, obs).astype(np.float32)
        return obs


if DRONE_ID not in gym.registry:
    gym.register(DRONE_ID, entry_point="relayrl.envs.drone:make_drone_env", nondeterministic=True)
