"""A dummy drone for :mod:`relayrl.envs.realtime`: the smallest device whose physics runs on wall time.

A 1-D point mass (altitude) driven by a vertical acceleration. Its state is integrated over the
real time elapsed between calls, not over a fixed ``dt``, so it behaves like hardware: a policy
that answers late lets the previous acceleration act longer, and the timing of the real-time env
shows up in the returns. It is the example of ``docs/realtime.md`` and the device behind the
registered ``relayrl/RealTimeDrone-v0``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.envs.realtime import RealTimeConfig, RealTimeEnv, RealTimeInterface

# what the registered id changes from rtgym's defaults: short steps so tests and demos run fast, one
# flat Box observation because relayrl's networks take flat Box observations
DRONE_CONFIG = {"time_step_duration": 0.02, "ep_max_length": 200, "flatten_obs": True}


class DummyDrone(RealTimeInterface):
    """Altitude control: reach and hold a target altitude with a bounded vertical acceleration.

    Observation: ``[position, velocity, target]`` (float32 Box; position and velocity are clipped
    to the space's bounds). Action: acceleration, ``Box(-max_accel, max_accel, (1,))``.
    Reward: ``-|position - target|``. Terminated when ``|position| > bound``.

    Args:
        target: fixed target altitude, or None for a uniform draw in ``[-target_range, target_range]``
            at every reset (seeded by ``reset(seed=...)``).
        target_range: half-width of the random targets.
        bound: the drone crashes (terminated) beyond ``±bound``.
        max_accel: acceleration limit; controls are clipped to it.
        max_speed: velocity bound of the observation space.
        clock: seconds, monotonic; tests pass a fake one to integrate deterministically.
    """

    def __init__(self, target: float | None = None, target_range: float = 2.0, bound: float = 5.0,
                 max_accel: float = 2.0, max_speed: float = 10.0, clock: Callable[[], float] = time.perf_counter):
        if target is not None and abs(target) >= bound:
            raise ValueError(f"target={target} is outside the flight zone ±{bound}: pick |target| < bound")
        self.target, self.target_range, self.bound = target, min(target_range, bound), bound
        self.max_accel, self.max_speed, self._clock = max_accel, max_speed, clock
        self._rng = np.random.default_rng()
        self._lock = threading.Lock()  # render() reads the state while the env's thread integrates it
        self.position = self.velocity = self.accel = 0.0
        self.goal = 0.0 if target is None else float(target)
        self._t = clock()

    def _advance(self) -> None:
        """Integrate the state over the wall time since the last call (constant acceleration meanwhile)."""
        now = self._clock()
        dt, self._t = now - self._t, now
        self.position += self.velocity * dt + 0.5 * self.accel * dt * dt
        self.velocity += self.accel * dt

    def send_control(self, control: Any) -> None:
        with self._lock:
            self._advance()
            self.accel = float(np.clip(np.asarray(control, dtype=np.float64).reshape(-1)[0],
                                       -self.max_accel, self.max_accel))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        with self._lock:
            self.position = self.velocity = self.accel = 0.0
            self._t = self._clock()
            self.goal = float(self.target if self.target is not None
                              else self._rng.uniform(-self.target_range, self.target_range))
            return self._obs(), {}

    def get_obs_rew_terminated_info(self) -> tuple[np.ndarray, float, bool, dict]:
        with self._lock:
            self._advance()
            return self._obs(), -abs(self.position - self.goal), abs(self.position) > self.bound, {}

    def _obs(self) -> np.ndarray:
        space = self.get_observation_space()
        return np.clip(np.array([self.position, self.velocity, self.goal], np.float32), space.low, space.high)

    def get_observation_space(self) -> gym.spaces.Box:
        high = np.array([self.bound, self.max_speed, self.bound], np.float32)
        return gym.spaces.Box(-high, high, dtype=np.float32)

    def get_action_space(self) -> gym.spaces.Box:
        return gym.spaces.Box(-self.max_accel, self.max_accel, (1,), np.float32)

    def get_default_action(self) -> np.ndarray:
        return np.zeros(1, np.float32)  # no gravity in this model: zero acceleration coasts

    def render(self) -> str:
        """One line of text: ``|`` the bounds, ``o`` the target, ``*`` the drone."""
        with self._lock:
            width = 41
            cells = [" "] * width
            scale = (width - 1) / (2 * self.bound)
            cells[int(round((self.goal + self.bound) * scale))] = "o"
            cells[int(round((np.clip(self.position, -self.bound, self.bound) + self.bound) * scale))] = "*"
            return "|" + "".join(cells) + f"| x={self.position:+.2f} v={self.velocity:+.2f}"


def make_drone_env(**kwargs: Any) -> RealTimeEnv:
    """Entry point of ``relayrl/RealTimeDrone-v0``: kwargs are DummyDrone's and RealTimeConfig's options.

    ``start_obs_capture`` defaults to ``time_step_duration`` (capture at the end of each step, as rtgym
    does), so changing the duration alone stays valid.
    """
    kwargs.pop("render_mode", None)  # text rendering only, through env.render()
    drone_keys = ("target", "target_range", "bound", "max_accel", "max_speed")
    drone = DummyDrone(**{k: kwargs.pop(k) for k in drone_keys if k in kwargs})
    options = {**DRONE_CONFIG, **kwargs}
    options.setdefault("start_obs_capture", options["time_step_duration"])
    return RealTimeEnv(drone, RealTimeConfig.from_kwargs(**options))
