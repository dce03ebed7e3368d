"""VectorEnv: N environment copies behind send/recv, with autoreset that keeps the final observation.

The interface every manager implements, the action checks and step results they share, and
SyncVectorEnv (all envs in this process). The other managers build on this module (envs/subproc.py,
envs/native.py); ``make_vec`` (envs/managers.py) picks and builds one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.envs import spaces
from relayrl.envs.masks import masked_factories
from relayrl.envs.runner import EnvFactory, EnvRunner, StepArrays, action_dtype
from relayrl.errors import EnvError
from relayrl.types import StepResult


class ActionError(EnvError, ValueError):
    """Actions of the wrong shape, dtype or range; raised before anything is sent to an env."""


class VectorEnv:
    """Interface shared by every manager."""

    num_envs: int
    single_observation_space: gym.Space
    single_action_space: gym.Space

    def reset(self, seed: int | None = None) -> Any:
        raise NotImplementedError

    def reset_action_mask(self) -> np.ndarray | None:
        """The action masks ([num_envs, width] bool, True = allowed; envs/masks.py) of the observations the
        last ``reset`` returned, or None when the envs give no masks. Steps carry theirs in ``StepResult``."""
        return None

    def send(self, actions: np.ndarray) -> None:
        raise NotImplementedError

    def recv(self) -> StepResult:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> StepResult:
        self.send(actions)
        return self.recv()

    @property
    def stats(self) -> dict[str, int]:
        """Fault counters: env errors, worker restarts, timeouts."""
        return {"errors": 0, "restarts": 0, "timeouts": 0}

    def close(self) -> None:
        pass

    def __enter__(self) -> "VectorEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- shared helpers
    def _setup_spaces(self, obs_space: gym.Space, act_space: gym.Space) -> None:
        self.single_observation_space, self.single_action_space = obs_space, act_space
        spaces.leaves(obs_space)  # refuses unsupported observation spaces with a clear message
        self._action_spec = ActionSpec(act_space)  # and unsupported action spaces

    def _check_actions(self, actions: Any, count: int) -> np.ndarray:
        return check_actions(self._action_spec, actions, count)


ResetParams = dict[int, tuple["int | None", "dict | None"]]  # env id -> (seed, Gymnasium reset options)


class EnvRows(ABC):
    """Managers whose envs can be stepped, reset and configured one by one (sync, subproc, async): what the
    id-keyed manager (envs/keyed.py) builds on, beside the array interface of VectorEnv."""

    autoreset: bool = True

    @abstractmethod
    def ready_env_ids(self) -> np.ndarray:
        """Env ids whose actions the next ``send`` / ``send_rows`` takes (async: those not stepping)."""

    @abstractmethod
    def send_rows(self, env_ids: np.ndarray, actions: Any) -> None:
        """Step only ``env_ids`` (ready ones, ascending); the other envs' rows stay as they were. ``recv``
        then returns those that stepped."""

    @abstractmethod
    def reset_rows(self, params: ResetParams) -> tuple[Any, list[dict], dict[int, str]]:
        """Reset each env of ``params`` with its ``(seed, options)`` (None: its planned seed, its last options);
        returns their observations (a batch, rows in the order of ``params``), reset infos, and the env ids whose
        env refused its options with the message naming it (those envs stay as they were, the others reset)."""

    @abstractmethod
    def configure_resets(self, autoreset: bool, seed_stride: int | None = None) -> None:
        """Whether a finished env resets on the step that ends it (False: its obs row is its final
        observation until ``reset_rows``), and the seed of each later reset: the env's last seed plus
        ``seed_stride`` (None: unseeded, the env's own random stream goes on)."""


class ActionSpec:
    """What ``check_actions`` needs of an action space, computed once."""

    def __init__(self, space: gym.Space):
        self.space, self.shape = space, tuple(space.shape)
        self.integer = action_dtype(space).kind in "iub"
        if self.integer:
            low, high = _int_bounds(space)
            self.low, self.high = (int(low), int(high)) if low.ndim == 0 and high.ndim == 0 else (low, high)


def check_actions(spec: ActionSpec | gym.Space, actions: Any, count: int) -> np.ndarray:
    """``actions`` as an array, or ActionError if its shape, dtype or range does not fit the space."""
    if not isinstance(spec, ActionSpec):
        spec = ActionSpec(spec)
    actions = np.asarray(actions)
    if actions.shape != (count, *spec.shape):
        raise ActionError(f"actions have shape {actions.shape}, expected {(count, *spec.shape)} "
                          f"({count} envs, action space {spec.space})")
    if spec.integer:
        if actions.dtype.kind not in "iub":
            raise ActionError(f"actions have dtype {actions.dtype}, expected integers for {spec.space}")
        if actions.size and (np.count_nonzero(actions < spec.low) or np.count_nonzero(actions > spec.high)):
            raise ActionError(f"actions out of range for {spec.space}: got values from {actions.min()} "
                              f"to {actions.max()}")
    elif actions.dtype.kind not in "fiu":
        raise ActionError(f"actions have dtype {actions.dtype}, expected numbers for {spec.space}")
    elif not np.isfinite(actions).all():
        raise ActionError(f"actions contain NaN or infinity: {actions}")
    return actions


def _int_bounds(space: gym.Space) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(space, gym.spaces.Discrete):
        return np.asarray(space.start), np.asarray(space.start + space.n - 1)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return np.asarray(space.start), np.asarray(space.start + space.nvec - 1)
    if isinstance(space, gym.spaces.MultiBinary):
        return np.asarray(0), np.asarray(1)
    return np.asarray(space.low), np.asarray(space.high)


def result_from(arrays: StepArrays, obs_space: gym.Space, rows: Any, env_ids: np.ndarray,
                infos: list[dict]) -> StepResult:
    """A StepResult holding copies of ``rows`` of ``arrays`` (the next step cannot overwrite it)."""
    masked = given_masks(arrays, rows)
    return StepResult(
        obs=spaces.copy_batch(obs_space, arrays.obs, rows),
        reward=arrays.reward[rows].copy(), terminated=arrays.terminated[rows].copy(),
        truncated=arrays.truncated[rows].copy(),
        final_obs=spaces.copy_batch(obs_space, arrays.final_obs, rows),
        env_ids=env_ids, info=infos,
        action_mask=arrays.action_mask[rows].copy() if masked else None,
        final_action_mask=arrays.final_action_mask[rows].copy() if masked else None)


def given_masks(arrays: StepArrays, rows: Any = slice(None)) -> bool:
    """Whether the envs of ``rows`` give action masks (then every row has one: all allowed where none was given)."""
    return arrays.mask_given is not None and bool(arrays.mask_given[rows].any())


class SyncVectorEnv(VectorEnv, EnvRows):
    """All envs in this process, stepped in order, results in preallocated arrays."""

    def __init__(self, factories: list[EnvFactory], max_restarts: int = 3):
        if not factories:
            raise EnvError("a vector env needs at least one environment (num_envs >= 1)")
        factories = masked_factories(factories)  # a Dict observation's action_mask entry goes to the info
        probe = factories[0]()
        self._setup_spaces(probe.observation_space, probe.action_space)
        probe.close()
        self.num_envs = len(factories)
        self.arrays = StepArrays.allocate(self.single_observation_space, self.single_action_space, self.num_envs)
        self.runner = EnvRunner(factories, self.arrays, max_restarts=max_restarts)
        self._env_ids = np.arange(self.num_envs)
        self._pending = False
        self._rows: list[int] | None = None  # the envs send_rows chose (None: every env)

    @property
    def envs(self) -> list[gym.Env]:
        return self.runner.envs

    def reset(self, seed: int | None = None) -> Any:
        self.runner.reset(seed)
        self._pending = False
        return spaces.copy_batch(self.single_observation_space, self.arrays.obs)

    def reset_action_mask(self) -> np.ndarray | None:
        return self.arrays.action_mask.copy() if given_masks(self.arrays) else None

    def send(self, actions: np.ndarray) -> None:
        self.arrays.actions[:] = self._check_actions(actions, self.num_envs)
        self._pending, self._rows = True, None

    def recv(self) -> StepResult:
        if not self._pending:
            raise EnvError("recv() called without a pending send(actions)")
        self._pending = False
        rows = self._rows
        found = self.runner.step(rows)
        if rows is not None:
            ids = np.asarray(rows, dtype=np.int64)
            return result_from(self.arrays, self.single_observation_space, ids, ids, [found.get(k, {}) for k in rows])
        infos = [found.get(k, {}) for k in range(self.num_envs)]
        return result_from(self.arrays, self.single_observation_space, slice(None), self._env_ids, infos)

    # ---- EnvRows
    def ready_env_ids(self) -> np.ndarray:
        return self._env_ids

    def send_rows(self, env_ids: np.ndarray, actions: Any) -> None:
        ids = np.asarray(env_ids, dtype=np.int64)
        self.arrays.actions[ids] = self._check_actions(actions, len(ids))
        self._pending, self._rows = True, ids.tolist()

    def reset_rows(self, params: ResetParams) -> tuple[Any, list[dict], dict[int, str]]:
        found, refused = self.runner.reset_rows(params)
        ids = np.fromiter(params, dtype=np.int64, count=len(params))
        obs = spaces.copy_batch(self.single_observation_space, self.arrays.obs, ids)
        return obs, [found.get(k, {}) for k in params], refused

    def configure_resets(self, autoreset: bool, seed_stride: int | None = None) -> None:
        self.autoreset = autoreset
        self.runner.configure(autoreset, seed_stride)

    @property
    def stats(self) -> dict[str, int]:
        return {"errors": self.runner.errors, "restarts": 0, "timeouts": 0}

    def render(self, index: int = 0) -> Any:
        return self.runner.envs[index].render()

    def close(self) -> None:
        self.runner.close()
