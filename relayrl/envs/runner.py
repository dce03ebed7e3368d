"""EnvRunner: steps a slice of environments and writes results into preallocated arrays.

The in-process manager and every subprocess worker run this same code, so all managers produce
identical trajectories for the same seeds and actions. Arrays may be plain numpy arrays or views
into shared memory; the runner never allocates per step.

Fault handling, per env: an exception in ``step`` ends that env's episode as truncated, with the
traceback in ``info["env_error"]`` and the last good observation as ``final_obs``; the env is
rebuilt from its factory and reset. After ``max_restarts`` consecutive failures of the same env,
``EnvFailure`` is raised instead of looping.

What the id-keyed manager (envs/keyed.py) asks of it, all off by default: ``step(rows)`` steps only those
envs (the others' rows stay as they were); ``autoreset=False`` leaves a finished env unreset (its obs row is
its final observation); ``reset_rows`` resets chosen envs with their own seed and Gymnasium reset
``options``; ``seed_stride`` gives each later reset of an env the seed of its last one plus the stride
(DI-engine's dynamic seeds; 0: every episode the same seed), and resets reuse an env's last options.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.envs import spaces
from relayrl.envs.checks import (obs_error, obs_mismatch, reset_result, reward_error, rewards_finite, step_error,
                                  wrapper_unpack_error)
from relayrl.envs.masks import MASK_KEY, check_mask, mask_width
from relayrl.errors import EnvError

EnvFactory = Callable[[], gym.Env]


class ResetParamError(EnvError):
    """An env's reset refused the options it was given (a TypeError): the env's message, naming the env."""


class EnvFailure(EnvError):
    """An env kept failing after ``max_restarts`` rebuilds: the run failed while running (exit code 1).

    The message names the last error and where the env raised it, on one line; ``details`` holds the
    whole traceback.
    """

    exit_code = 1

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


def last_error(tb: str) -> str:
    """``RuntimeError: boom (envs.py:53 in step)`` from a formatted traceback: its last line and innermost frame."""
    lines = [line for line in tb.strip().splitlines() if line.strip()]
    frames = [line.strip() for line in lines if line.strip().startswith('File "')]
    where = ""
    if frames:
        parts = frames[-1].split('"')
        rest = parts[2].split(",") if len(parts) > 2 else []
        line_no = rest[1].strip().removeprefix("line ") if len(rest) > 1 else "?"
        func = rest[2].strip().removeprefix("in ") if len(rest) > 2 else "?"
        where = f" (at {parts[1]}:{line_no} in {func})"
    return (lines[-1].strip() if lines else "unknown error") + where


@dataclass
class StepArrays:
    """The arrays one step writes: obs and final_obs leaves, reward, flags, and the actions read.

    For Discrete and MultiDiscrete action spaces also the action masks (envs/masks.py, True = allowed)
    of ``obs`` and of ``final_obs``, and ``mask_given`` ([n] bool): the env gave a mask at least once
    (rows of envs that give none allow everything).
    """

    obs: list[np.ndarray]
    final_obs: list[np.ndarray]
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    actions: np.ndarray
    action_mask: np.ndarray | None = None
    final_action_mask: np.ndarray | None = None
    mask_given: np.ndarray | None = None

    @classmethod
    def allocate(cls, obs_space: gym.Space, act_space: gym.Space, n: int) -> "StepArrays":
        layout = cls.layout(obs_space, act_space, n)
        return cls.from_named({name: np.zeros(shape, dtype) for name, shape, dtype in layout})

    @staticmethod
    def layout(obs_space: gym.Space, act_space: gym.Space, n: int) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        """(name, shape, dtype) of every array, for laying them out in one shared-memory block."""
        out = []
        for prefix in ("obs", "final_obs"):
            out += [(f"{prefix}.{i}", (n, *leaf.shape), leaf.dtype) for i, leaf in enumerate(spaces.leaves(obs_space))]
        out += [("reward", (n,), np.dtype(np.float32)), ("terminated", (n,), np.dtype(bool)),
                ("truncated", (n,), np.dtype(bool)),
                ("actions", (n, *act_space.shape), action_dtype(act_space))]
        width = mask_width(act_space)
        if width:
            out += [("action_mask", (n, width), np.dtype(bool)), ("final_action_mask", (n, width), np.dtype(bool)),
                    ("mask_given", (n,), np.dtype(bool))]
        return out

    @classmethod
    def from_named(cls, arrays: dict[str, np.ndarray]) -> "StepArrays":
        count = sum(1 for key in arrays if key.startswith("obs."))
        return cls(obs=[arrays[f"obs.{i}"] for i in range(count)],
                   final_obs=[arrays[f"final_obs.{i}"] for i in range(count)],
                   reward=arrays["reward"], terminated=arrays["terminated"], truncated=arrays["truncated"],
                   actions=arrays["actions"], action_mask=arrays.get("action_mask"),
                   final_action_mask=arrays.get("final_action_mask"), mask_given=arrays.get("mask_given"))


def action_dtype(space: gym.Space) -> np.dtype:
    if isinstance(space, gym.spaces.Discrete):
        return np.dtype(np.int64)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return np.dtype(space.dtype)
    raise EnvError(f"action space {space} is not supported: use Box, Discrete, MultiBinary or MultiDiscrete")


class EnvRunner:
    """Steps envs ``offset .. offset + len(factories) - 1`` (global ids) into rows of ``arrays``."""

    def __init__(self, factories: list[EnvFactory], arrays: StepArrays, offset: int = 0, max_restarts: int = 3):
        self.factories, self.arrays, self.offset, self.max_restarts = factories, arrays, offset, max_restarts
        self.envs = [factory() for factory in factories]
        self.obs_space = self.envs[0].observation_space
        self.act_space = self.envs[0].action_space
        self._masked = False  # an env of this slice gave an action mask: rows without one are written too
        if arrays.action_mask is not None:
            arrays.action_mask[:] = True
            arrays.final_action_mask[:] = True
        self.failures = [0] * len(self.envs)  # consecutive failures, per env
        self.errors = 0
        self._plain = len(arrays.obs) == 1 and not isinstance(self.obs_space, (gym.spaces.Dict, gym.spaces.Tuple))
        self._shape = arrays.obs[0].shape[1:]  # one observation's (of a plain space)
        self._check_obs = True  # check the observations' shapes on the next step (envs/checks.py)
        self._steps = 0  # steps of this runner
        self._episode_start = [0] * len(self.envs)  # self._steps at each env's last reset
        self.autoreset = True
        self.seed_stride: int | None = None
        self._next: list[tuple[int | None, dict | None]] = [(None, None)] * len(self.envs)  # next reset's seed, options

    def configure(self, autoreset: bool = True, seed_stride: int | None = None) -> None:
        """Whether finished envs reset on the step that ends them, and the seed stride of later resets."""
        self.autoreset, self.seed_stride = autoreset, seed_stride
        self._next = [(None, None)] * len(self.envs)

    def _write_obs(self, target: list[np.ndarray], k: int, obs: Any, call: str = "step") -> None:
        try:
            if self._plain:
                target[0][k] = obs
                return
            for array, value in zip(target, spaces.flatten(self.obs_space, obs)):
                array[k] = value
        except (ValueError, TypeError, KeyError, IndexError):  # (free until raised)
            raise self._obs_error(k, call, obs) from None

    def _fits(self, obs: Any) -> bool:
        """Whether ``obs`` has the observation space's shapes (a plain space: one shape compared)."""
        if self._plain:
            return np.shape(obs) == self._shape
        return obs_mismatch(self.obs_space, self.arrays.obs, obs) is None

    def _obs_error(self, k: int, call: str, obs: Any) -> EnvError:
        what = obs_mismatch(self.obs_space, self.arrays.obs, obs) or f"an observation that does not fit: {obs!r}"
        return obs_error(self.envs[k], self.offset + k, call, what, self.obs_space)

    def _take_mask(self, target: np.ndarray | None, k: int, info: dict) -> dict:
        """Write env k's action mask from ``info`` into ``target[k]`` (all allowed when it gave none, once any
        env did); returns ``info`` without it (the mask travels in the arrays, not in pickled infos)."""
        if target is None:
            return info
        if info and MASK_KEY in info:
            target[k] = check_mask(info[MASK_KEY], self.act_space, f"env {self.offset + k}'s info['{MASK_KEY}']")
            if not self._masked:
                self._masked = True
                self.arrays.mask_given[:] = True
            return {key: value for key, value in info.items() if key != MASK_KEY}
        if self._masked:
            target[k] = True
        return info

    def reset(self, seed: int | None = None) -> dict[int, dict]:
        """Reset every env (env k gets ``seed + offset + k``); returns non-empty reset infos by row."""
        self._next = [(None, None)] * len(self.envs)
        infos, _ = self.reset_rows({k: (None if seed is None else seed + self.offset + k, None)
                                    for k in range(len(self.envs))})  # (no options: none refused)
        return infos

    def reset_rows(self, params: dict[int, tuple[int | None, dict | None]]) -> tuple[dict[int, dict], dict[int, str]]:
        """Reset env ``k`` (a row of this slice) with ``(seed, options)`` for each item (None: its planned
        seed / last options); returns the non-empty reset infos by row, and the rows whose env refused its
        options (a TypeError: bad input) with the message naming it. Those stay as they were; the others reset."""
        infos, refused = {}, {}
        for k, (seed, options) in params.items():
            planned_seed, planned_options = self._next[k]
            try:
                obs, info = self._reset_one(k, planned_seed if seed is None else seed,
                                            planned_options if options is None else options)
            except ResetParamError as exc:
                refused[k] = str(exc)
                continue
            self._write_obs(self.arrays.obs, k, obs, "reset")
            info = self._take_mask(self.arrays.action_mask, k, info)
            if info:
                infos[k] = info
        return infos, refused

    def _planned_reset(self, k: int) -> tuple[Any, dict]:
        return self._reset_one(k, *self._next[k])

    def _reset_one(self, k: int, seed: int | None, options: dict | None = None) -> tuple[Any, dict]:
        while True:
            env = self.envs[k]
            try:
                result = env.reset(seed=seed) if options is None else env.reset(seed=seed, options=options)
                if seed is not None:
                    env.action_space.seed(seed)
                break
            except Exception as exc:
                mistake = wrapper_unpack_error(env, self.offset + k, "reset", exc)
                if mistake is not None:
                    raise mistake from None
                if options is not None and isinstance(exc, TypeError):
                    raise ResetParamError(f"env {self.offset + k} refused reset options {sorted(options)}: "
                                          f"{last_error(traceback.format_exc())}; give options its reset "
                                          "takes") from None
                self._fail(k, traceback.format_exc())
        obs, info = reset_result(env, self.offset + k, result)
        if not self._fits(obs):  # (every reset's)
            raise self._obs_error(k, "reset", obs)
        self._episode_start[k] = self._steps
        if self.seed_stride is not None and seed is not None or options is not None:
            self._next[k] = (None if seed is None or self.seed_stride is None else seed + self.seed_stride,
                             options)
        return obs, info

    def _fail(self, k: int, tb: str) -> None:
        """Count a failure of env k and rebuild it, or raise once it failed too often in a row."""
        self.errors += 1
        self.failures[k] += 1
        if self.failures[k] > self.max_restarts:
            raise EnvFailure(f"env {self.offset + k} failed {self.failures[k]} times in a row "
                             f"(env.max_restarts={self.max_restarts}), last with {last_error(tb)}: fix the env or "
                             "raise env.max_restarts", details=tb)
        try:
            self.envs[k].close()
        except Exception:
            pass
        self.envs[k] = self.factories[k]()
        self._check_obs = True

    def step(self, rows: list[int] | None = None) -> dict[int, dict]:
        """Step every env (or those of ``rows``) with ``arrays.actions``; autoreset keeps the final observation.

        Returns the non-empty infos by row (most steps: an empty dict, nothing to send).
        """
        a = self.arrays
        infos: dict[int, dict] = {}
        n = len(self.envs)
        # per-env scalars go through Python lists and land in the arrays in one write each; actions go
        # out as numpy scalars/rows, as Gymnasium's own vector envs send them (its Discrete check is
        # faster on np.int64 than on a Python int)
        actions = a.actions
        rewards, terms, truncs = [0.0] * n, [False] * n, [False] * n
        self._steps += 1
        check, self._check_obs = self._check_obs, False
        ended: dict[int, int] = {}  # env -> the length of its episode that ended on this step
        for k, env in enumerate(self.envs) if rows is None else ((k, self.envs[k]) for k in rows):
            try:
                result = env.step(actions[k])
            except Exception as exc:
                mistake = wrapper_unpack_error(env, self.offset + k, "step", exc)
                if mistake is not None:
                    raise mistake from None
                tb = traceback.format_exc()
                for src, dst in zip(a.obs, a.final_obs):  # the last good observation ends the episode
                    dst[k] = src[k]
                if a.action_mask is not None:
                    a.final_action_mask[k] = a.action_mask[k]
                self._fail(k, tb)
                obs, reset_info = self._planned_reset(k)  # a rebuilt env starts a new episode, autoreset or not
                self._write_obs(a.obs, k, obs)
                reset_info = self._take_mask(a.action_mask, k, reset_info)
                truncs[k] = True
                infos[k] = {"env_error": tb, **({"reset_info": reset_info} if reset_info else {})}
                continue
            try:
                obs, reward, terminated, truncated, info = result
            except (TypeError, ValueError):
                raise step_error(env, self.offset + k, result) from None
            if check and not self._fits(obs):
                raise self._obs_error(k, "step", obs)
            if self.failures[k]:
                self.failures[k] = 0
            rewards[k], terms[k], truncs[k] = reward, terminated, truncated
            if terminated or truncated:
                ended[k] = self._steps - self._episode_start[k]  # (its reset below starts the count anew)
                self._write_obs(a.final_obs, k, obs)
                info = self._take_mask(a.final_action_mask, k, info)
                if self.autoreset:
                    obs, reset_info = self._planned_reset(k)
                    reset_info = self._take_mask(a.action_mask, k, reset_info)
                    if reset_info:
                        info = {**info, "reset_info": reset_info}
                elif a.action_mask is not None:
                    a.action_mask[k] = a.final_action_mask[k]
            else:
                info = self._take_mask(a.action_mask, k, info)
            self._write_obs(a.obs, k, obs)
            if info:
                infos[k] = info
        if not rewards_finite(rewards):
            steps = [ended.get(k, self._steps - start) for k, start in enumerate(self._episode_start)]
            error = reward_error(self.envs, self.offset, rewards, steps, actions)
            if error is not None:
                raise error
        if rows is None:
            a.reward[:], a.terminated[:], a.truncated[:] = rewards, terms, truncs
        else:
            a.reward[rows] = [rewards[k] for k in rows]
            a.terminated[rows], a.truncated[rows] = [terms[k] for k in rows], [truncs[k] for k in rows]
        return infos

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:
                pass
        self.envs = []
