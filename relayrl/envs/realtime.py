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

import abc
import copy
import dataclasses
import difflib
import math
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.errors import ConfigError

DRONE_ID = "relayrl/RealTimeDrone-v0"


class RealTimeWarning(RuntimeWarning):
    """The caller took so long between two ``step`` calls that the clock had to be re-anchored."""


class RealTimeInterface(abc.ABC):
    """What a device (robot, game, simulator running in wall time) implements for :class:`RealTimeEnv`.

    ``send_control`` and ``get_obs_rew_terminated_info`` run in the env's background thread, the
    other methods in the caller's; only ``render`` may overlap a running time step.
    """

    @abc.abstractmethod
    def send_control(self, control: Any) -> None:
        """Apply ``control`` now and return without waiting for its effect; it applies until the next one."""

    @abc.abstractmethod
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Bring the device to the start of an episode and return ``(observation, info)``."""

    @abc.abstractmethod
    def get_obs_rew_terminated_info(self) -> tuple[Any, float, bool, dict]:
        """Capture the current ``(observation, reward, terminated, info)``."""

    @abc.abstractmethod
    def get_observation_space(self) -> gym.Space:
        """The space of the observations (a Tuple's entries are spread in the env's observation)."""

    @abc.abstractmethod
    def get_action_space(self) -> gym.Space:
        """The space of the controls."""

    @abc.abstractmethod
    def get_default_action(self) -> Any:
        """The safe control (e.g. "hover", "brake") applied at reset and while waiting."""

    def wait(self) -> None:
        """Hold the device while no one acts (episode over, learner paused): sends the default action."""
        self.send_control(self.get_default_action())

    def render(self) -> Any:
        """Show the device's state; the return value is passed through ``env.render()``."""
        return None

    def close(self) -> None:
        """Release the device (called once by ``env.close()``)."""


@dataclass(frozen=True)
class RealTimeConfig:
    """Timing of a :class:`RealTimeEnv` (rtgym's options and defaults, plus ``flatten_obs``)."""

    time_step_duration: float = 0.05
    """Nominal wall-clock length of one time step, in seconds."""
    start_obs_capture: float = 0.05
    """Offset from the step's start at which the observation is captured (0 .. time_step_duration)."""
    time_step_timeout_factor: float = 1.0
    """A caller later than duration x factor after a step's end re-anchors the clock (a late step)."""
    ep_max_length: int | None = None
    """Truncate episodes after this many steps (None: never)."""
    act_in_obs: bool = True
    """Append the last ``act_buf_len`` actions to the observation (they act while the policy thinks)."""
    act_buf_len: int = 1
    """How many past actions the action buffer holds."""
    reset_act_buf: bool = True
    """reset() refills the action buffer with default actions (else it keeps the last episode's)."""
    wait_on_done: bool = False
    """Call the interface's wait() when an episode terminates or is truncated."""
    last_act_on_reset: bool = False
    """reset() applies the previous episode's last action instead of the default action."""
    flatten_obs: bool = False
    """Concatenate the observation and action buffer into one float32 Box (what relayrl's nets take)."""

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, fix: str) -> None:
            if not ok:
                raise ConfigError(f"real-time config {name}={getattr(self, name)!r}: {fix}")

        for name in ("time_step_duration", "start_obs_capture", "time_step_timeout_factor"):
            value = getattr(self, name)
            check(name, isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
                  "give a finite number of seconds")
        check("time_step_duration", self.time_step_duration > 0, "it must be > 0 seconds, e.g. 0.05")
        check("start_obs_capture", 0 <= self.start_obs_capture <= self.time_step_duration,
              f"it must be between 0 and time_step_duration={self.time_step_duration}; set it to "
              "time_step_duration to capture the observation at the end of each step")
        check("time_step_timeout_factor", self.time_step_timeout_factor >= 0,
              "it must be >= 0 (0: any delay re-anchors the clock)")
        is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
        check("act_buf_len", is_int(self.act_buf_len) and self.act_buf_len >= 0, "give an integer >= 0")
        check("ep_max_length", self.ep_max_length is None or (is_int(self.ep_max_length) and self.ep_max_length >= 1),
              "give an integer >= 1, or None (null) for no limit")
        for field in dataclasses.fields(self):
            if field.type == "bool":
                check(field.name, isinstance(getattr(self, field.name), bool), "give true or false")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "RealTimeConfig":
        """Build from keyword arguments; an unknown key is a ConfigError naming the closest field."""
        names = [field.name for field in dataclasses.fields(cls)]
        for key in kwargs:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known options: {', '.join(names)}"
                raise ConfigError(f"unknown real-time config option {key!r}: {hint}")
        return cls(**kwargs)


class ElasticClock:
    """Start, capture and end times of the current time step, on rtgym's elastic grid."""

    def __init__(self, duration: float, capture: float, timeout: float):
        self.duration, self.capture, self.timeout = duration, capture, timeout
        self.t_start = self.t_capture = self.t_end = 0.0

    def restart(self, now: float) -> None:
        """Anchor a new time step at ``now``."""
        self.t_start, self.t_capture, self.t_end = now, now + self.capture, now + self.duration

    def advance(self, now: float) -> bool:
        """Start the next time step for a caller arriving at ``now``; True if it was late (re-anchored)."""
        late = now >= self.t_end + self.timeout
        # on time: the new step starts where the last one ended, so small delays do not accumulate
        self.restart(now if late else self.t_end)
        return late


class RunningStat:
    """Count, mean, std and max of a stream in O(1) memory (Welford)."""

    def __init__(self) -> None:
        self.count, self.mean, self._m2, self.max, self.min = 0, 0.0, 0.0, -math.inf, math.inf

    def add(self, x: float) -> None:
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self._m2 += delta * (x - self.mean)
        self.max, self.min = max(self.max, x), min(self.min, x)

    @property
    def std(self) -> float:
        return math.sqrt(self._m2 / self.count) if self.count else math.nan

    def summary(self) -> tuple[float, float, float]:
        """(mean, std, max); NaN while empty."""
        return (self.mean, self.std, self.max) if self.count else (math.nan, math.nan, math.nan)


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
        bottleneck).
        """
        with self._lock:
            s = self._stats
            dur, cap, inf, wait = (s[k].summary() for k in ("duration", "capture", "inference", "wait"))
            d = s["deviation"]
            jitter = math.sqrt(d.std ** 2 + d.mean ** 2) if d.count else math.nan
            jitter_max = max(abs(d.max), abs(d.min)) if d.count else math.nan
            return {"steps": self._steps, "late_steps": self._late, "episodes": self._episodes,
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
