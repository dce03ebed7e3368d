"""The parts of a real-time env a user touches or tests on their own: the interface to implement,
the timing config (rtgym's options and defaults), the elastic clock and O(1)-memory statistics.
``relayrl.envs.realtime`` puts them together into a Gymnasium env (and re-exports them)."""

from __future__ import annotations

import abc
import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from relayrl.errors import ConfigError


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
    """Concatenate the observation and action buffer into one float32 Box (an MLP's input; images become floats).
    False: the Tuple, which relayrl.envs.make packs so each part gets its own encoder and images stay uint8."""

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
