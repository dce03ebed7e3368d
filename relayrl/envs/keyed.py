"""EnvManager: DI-engine's env manager interface, keyed by env id, over relayrl's vector managers.

Usage, as DI-engine's users write the loop::

    manager = EnvManager("CartPole-v1", num_envs=4, manager="subproc", auto_reset=False, episode_num=2)
    manager.seed(0, dynamic_seed=True)  # env k's episode e starts from seed 0 + k + e * num_envs
    manager.launch()
    while not manager.done:
        obs = manager.ready_obs  # {env_id: obs} of the envs waiting for an action
        timesteps = manager.step({env_id: policy(o) for env_id, o in obs.items()})
        for env_id, t in timesteps.items():  # Timestep(obs, reward, terminated, truncated, done, info, final_obs)
            if manager.env_state[env_id] is EnvState.NEED_RESET:
                manager.reset({env_id: {"options": {...}}})  # Gymnasium's reset(seed=, options=)
    manager.close()

A thin view: the envs are rows of a ``make_vec`` manager (envs/vector.py ``EnvRows``: sync, subproc, async),
which steps only the envs given actions, leaves finished envs unreset when ``auto_reset`` is off and resets
single envs with their own seed and options. While every env runs and all are given actions, a step is one
gather of the actions into an array, the array interface's step, and one scatter into timesteps. ``native``
steps every env on every call and resets them itself: only ``auto_reset=True``, no ``episode_num``, no seeds.

Env errors: the runner ends the failing env's episode as truncated with ``info["env_error"]``, rebuilds the
env and resets it. The timestep says so; with ``auto_reset`` the env then runs on (RUN), without it the env
waits in ERROR for ``reset`` like a finished one. An errored episode does not count toward ``episode_num``.
"""

from __future__ import annotations

import enum
from functools import partial
from itertools import repeat
from typing import Any, Mapping, NamedTuple

import numpy as np

from relayrl.envs.managers import make_vec
from relayrl.envs.native import NativeVectorEnv
from relayrl.envs.runner import EnvFactory
from relayrl.envs.subproc import SubprocVectorEnv
from relayrl.envs.vector import EnvRows, ResetParams, VectorEnv
from relayrl.errors import EnvError
from relayrl.types import StepResult

RESET_KEYS = ("seed", "options")  # what Gymnasium's reset takes


class EnvState(enum.Enum):
    """DI-engine's env states."""

    VOID = "void"  # built, not launched
    INIT = "init"  # launching
    RUN = "run"  # waiting for an action (under async: or stepping)
    RESET = "reset"  # being reset
    DONE = "done"  # finished its episode_num episodes: out of ready_obs
    ERROR = "error"  # its env raised; rebuilt and reset underneath, it waits for reset() (auto_reset off)
    NEED_RESET = "need_reset"  # its episode ended and auto_reset is off: out of ready_obs until reset()


class Timestep(NamedTuple):
    """One env's step. An immutable tuple, as DI-engine's ``BaseEnvTimestep`` (a namedtuple): a frozen
    dataclass costs ~1 µs more per env and step (docs/benchmarks.md).

    ``obs`` is what the env acts on next: after an auto-reset, the new episode's first observation. ``final_obs``
    is the episode's last observation when ``done``, else None.
    """

    obs: Any
    reward: float
    terminated: bool
    truncated: bool
    done: bool
    info: dict
    final_obs: Any = None


_timestep = partial(tuple.__new__, Timestep)  # Timestep from a 7-tuple in C (Timestep._make runs Python per env)


class EnvManager:
    """``num_envs`` copies of an env, driven by env id (module docstring).

    Args:
        env: a Gymnasium id or an env factory, as ``make_vec`` takes.
        manager: ``sync``, ``subproc``, ``async`` or ``native``.
        auto_reset: reset a finished env on the step that ends it; False leaves it in NEED_RESET.
        episode_num: episodes per env; an env that finished them goes DONE (None: no limit).
        make_vec_options: the rest of ``make_vec``'s arguments (workers, env_kwargs, max_episode_steps, ...).
    """

    def __init__(self, env: str | EnvFactory, num_envs: int, *, manager: str = "sync", auto_reset: bool = True,
                 episode_num: int | None = None, **make_vec_options: Any):
        _check_settings("native" if manager == "native" else None, auto_reset, episode_num)
        if "seed" in make_vec_options:
            raise EnvError("EnvManager seeds with manager.seed(seed, dynamic_seed=...) before launch(), not seed=")
        self._setup(make_vec(env, num_envs, manager=manager, **make_vec_options), auto_reset, episode_num)

    @classmethod
    def over(cls, venv: VectorEnv, *, auto_reset: bool = True, episode_num: int | None = None) -> "EnvManager":
        """An id-keyed view of a vector env built by ``make_vec`` (launch() resets it)."""
        _check_settings(None if isinstance(venv, EnvRows) else _kind(venv), auto_reset, episode_num)
        manager = cls.__new__(cls)
        manager._setup(venv, auto_reset, episode_num)
        return manager

    def _setup(self, venv: VectorEnv, auto_reset: bool, episode_num: int | None) -> None:
        self.venv, self.auto_reset, self.episode_num = venv, auto_reset, episode_num
        self.env_num = venv.num_envs
        self._rows: EnvRows | None = venv if isinstance(venv, EnvRows) else None
        self._async = isinstance(venv, SubprocVectorEnv) and venv.asynchronous
        self._ids = list(range(self.env_num))
        self._states = dict.fromkeys(self._ids, EnvState.VOID)
        self._episodes = dict.fromkeys(self._ids, 0)
        self._obs: list[Any] = [None] * self.env_num  # each env's latest observation, by env id
        self._all_run = False  # every env RUN: a step may take the array path
        self._seed: int | None = None
        self._dynamic_seed = True
        self.errors: dict[int, str] = {}  # env id -> the traceback of its last env error

    # ---- DI-engine's calls
    def seed(self, seed: int, dynamic_seed: bool = True) -> None:
        """Env k's first episode starts from ``seed + k``; with ``dynamic_seed`` its episode e from
        ``seed + k + e * env_num`` (deterministic, no two alike), without it every episode from ``seed + k``."""
        if self._rows is None:
            raise EnvError("the native manager resets its envs itself from one random stream per env: it takes no "
                           "per-episode seeds; use manager='sync' or 'subproc' for seed()")
        self._seed, self._dynamic_seed = int(seed), dynamic_seed
        if self._states[0] is not EnvState.VOID:
            self.launch()

    def launch(self, reset_param: Mapping[int, Mapping[str, Any]] | None = None) -> None:
        """Start every env: configure resets and reset all (``reset_param``: per-env ``seed`` / ``options``)."""
        self._set_states(self._ids, EnvState.INIT)
        if self._rows is None:
            if reset_param:
                raise EnvError("the native manager resets all its envs at once: it takes no reset_param; use "
                               "manager='sync' or 'subproc'")
            self._obs = _split(self.venv.reset(), self.env_num)
            self._set_states(self._ids, EnvState.RUN)
            return
        stride = None if self._seed is None else self.env_num if self._dynamic_seed else 0
        self._rows.configure_resets(self.auto_reset, stride)
        params = dict.fromkeys(self._ids, (None, None)) | self._params(reset_param or {})
        if self._seed is not None:
            params = {i: (self._seed + i if seed is None else seed, options) for i, (seed, options) in params.items()}
        self._reset(params)
        self._episodes = dict.fromkeys(self._ids, 0)

    @property
    def ready_obs(self) -> dict[int, Any]:
        """{env_id: obs} of the envs waiting for an action (RUN, and under async not stepping)."""
        if self._all_run and not self._async:
            return dict(zip(self._ids, self._obs))
        ready = self._ids if self._rows is None else self._rows.ready_env_ids().tolist()
        return {i: self._obs[i] for i in ready if self._states[i] is EnvState.RUN}

    def step(self, actions: Mapping[int, Any]) -> dict[int, Timestep]:
        """Step the envs of ``actions`` ({env_id: action}); returns {env_id: Timestep} of the envs that stepped
        (async: of those whose workers answered first)."""
        if self._all_run and not self._async and len(actions) == self.env_num:  # (never before launch)
            try:
                gathered = [actions[i] for i in self._ids]
            except KeyError:
                gathered = None
            if gathered is not None:
                return self._scatter(self.venv.step(np.asarray(gathered)), self._ids)
        if self._states[0] is EnvState.VOID:
            raise EnvError("step() before launch(): call manager.launch() (after manager.seed(...)) first")
        ids = self._check_ids(actions)
        if self._rows is None:
            raise EnvError(f"the native manager steps every env on every call: give actions for all {self.env_num} "
                           "envs, or use manager='sync' or 'subproc' to step some")
        if ids:
            self._rows.send_rows(np.asarray(ids, dtype=np.int64), np.asarray([actions[i] for i in ids]))
        elif not self._async:
            raise EnvError("step() got no actions: give {env_id: action} for the envs of manager.ready_obs")
        return self._scatter(self.venv.recv())

    def reset(self, reset_param: Mapping[int, Mapping[str, Any]] | None = None) -> None:
        """Reset the envs of ``reset_param`` ({env_id: {"seed": ..., "options": {...}}}; None: every env, episode
        counts from zero). An env without a seed gets its planned one (``seed``), without options its last ones."""
        if self._states[0] is EnvState.VOID:
            raise EnvError("reset() before launch(): call manager.launch() first")
        if reset_param is None or self._rows is None:
            self.launch(reset_param)
            return
        params = self._params(reset_param)
        for i in params:
            if self._states[i] is EnvState.DONE:
                self._episodes[i] = 0
        self._reset(params)

    @property
    def env_state(self) -> dict[int, EnvState]:
        """{env_id: EnvState}."""
        return dict(self._states)

    @property
    def done(self) -> bool:
        """Every env finished its ``episode_num`` episodes."""
        return all(state is EnvState.DONE for state in self._states.values())

    @property
    def episode_count(self) -> dict[int, int]:
        """{env_id: episodes finished since launch (or since its reset out of DONE)}."""
        return dict(self._episodes)

    def close(self) -> None:
        self.venv.close()
        self._set_states(self._ids, EnvState.VOID)

    def __enter__(self) -> "EnvManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- underneath
    def _set_states(self, ids: Any, state: EnvState) -> None:
        for i in ids:
            self._states[i] = state
        self._all_run = all(s is EnvState.RUN for s in self._states.values())

    def _params(self, reset_param: Mapping[int, Mapping[str, Any]]) -> ResetParams:
        """{env_id: (seed, options)} from DI-engine's reset_param, or an EnvError naming the env and the fix."""
        if not isinstance(reset_param, Mapping):
            raise EnvError(f"reset_param must map env ids to {{'seed': ..., 'options': {{...}}}}, got {reset_param!r}")
        unknown = sorted(set(reset_param) - set(self._ids), key=str)
        if unknown:
            raise EnvError(f"reset_param names unknown env ids {unknown}: this manager's envs are "
                           f"0..{self.env_num - 1}")
        params: ResetParams = {}
        for i in sorted(reset_param):
            param = reset_param[i]
            extra = sorted(set(param) - set(RESET_KEYS), key=str)
            if extra:
                raise EnvError(f"reset_param for env {i} has keys {extra} that Gymnasium's reset does not take (it "
                               f"takes seed and options): put env-specific parameters under options, e.g. "
                               f"{{{i}: {{'options': {{{extra[0]!r}: ...}}}}}}")
            options = param.get("options")
            if options is not None and not isinstance(options, Mapping):
                raise EnvError(f"reset_param for env {i}: options must be a dict, got {options!r}")
            seed = param.get("seed")
            params[i] = (None if seed is None else int(seed), None if options is None else dict(options))
        return params

    def _reset(self, params: ResetParams) -> None:
        if self._async:
            stepping = sorted(set(params) - set(self._rows.ready_env_ids().tolist()))
            if stepping:
                raise EnvError(f"envs {stepping} are still stepping (async manager): reset them after the step() "
                               "that returns them")
        before = {i: self._states[i] for i in params}
        self._set_states(params, EnvState.RESET)
        obs, _, refused = self._rows.reset_rows(params)
        for i, o in zip(params, _split(obs, len(params))):
            if i in refused:  # options its env refused: it stays as it was
                self._set_states((i,), before[i])
                continue
            self._obs[i] = o
            self._set_states((i,), EnvState.RUN)
            self.errors.pop(i, None)
        if refused:
            others = sorted(set(params) - set(refused))
            raise EnvError("; ".join(refused[i] for i in sorted(refused))
                           + (f" (envs {others} of the same reset() were reset)" if others else ""))

    def _check_ids(self, actions: Mapping[int, Any]) -> list[int]:
        """The env ids of ``actions``, ascending, or an EnvError naming the first one that cannot act."""
        unknown = sorted(set(actions) - set(self._ids), key=str)
        if unknown:
            raise EnvError(f"step() got actions for unknown env ids {unknown}: this manager's envs are "
                           f"0..{self.env_num - 1} (manager.ready_obs lists the ready ones)")
        ids = sorted(actions)
        ready = None if not self._async else set(self._rows.ready_env_ids().tolist())
        for i in ids:
            state = self._states[i]
            if state is EnvState.NEED_RESET:
                raise EnvError(f"env {i} is NEED_RESET (its episode ended and auto_reset is off): reset it with "
                               f"manager.reset({{{i}: {{}}}}) before giving it actions")
            if state is EnvState.DONE:
                raise EnvError(f"env {i} is DONE (it finished its episode_num={self.episode_num} episodes): leave it "
                               f"out of step(), or reset it with manager.reset({{{i}: {{}}}}) to run it again")
            if state is EnvState.ERROR:
                raise EnvError(f"env {i} is in ERROR (its env raised; manager.errors[{i}] has the traceback): reset "
                               f"it with manager.reset({{{i}: {{}}}}) before giving it actions")
            if ready is not None and i not in ready:
                raise EnvError(f"env {i} is still stepping (async manager): give actions only to the envs of "
                               "manager.ready_obs")
        return ids

    def _scatter(self, result: StepResult, ids: list[int] | None = None) -> dict[int, Timestep]:
        """{env_id: Timestep} of a step's rows (``ids``: their env ids when known): the per-env objects DI-engine's
        users get, built in one pass."""
        ids = result.env_ids.tolist() if ids is None else ids
        n = len(ids)
        obs = _split(result.obs, n)
        if ids is self._ids:  # every env stepped: the list is the new latest observations
            self._obs = obs
        else:
            for i, o in zip(ids, obs):
                self._obs[i] = o
        terms, truncs = result.terminated.tolist(), result.truncated.tolist()
        if True in terms or True in truncs:
            dones = [term or trunc for term, trunc in zip(terms, truncs)]
            finals: Any = [None] * n
            for k, done in enumerate(dones):
                if done:
                    finals[k] = _row(result.final_obs, k)
                    self._episode_ended(ids[k], result.info[k])
        else:
            dones, finals = repeat(False, n), repeat(None, n)
        return dict(zip(ids, map(_timestep, zip(obs, result.reward.tolist(), terms, truncs, dones, result.info,
                                                finals))))

    def _episode_ended(self, i: int, info: Mapping[str, Any]) -> None:
        if "env_error" in info:
            self.errors[i] = info["env_error"]
            state = EnvState.RUN if self.auto_reset else EnvState.ERROR
        else:
            self._episodes[i] += 1
            if self.episode_num is not None and self._episodes[i] >= self.episode_num:
                state = EnvState.DONE
            else:
                state = EnvState.RUN if self.auto_reset else EnvState.NEED_RESET
        if state is not EnvState.RUN:
            self._set_states((i,), state)


def _kind(venv: VectorEnv) -> str:
    return "native" if isinstance(venv, NativeVectorEnv) else type(venv).__name__


def _check_settings(all_at_once: str | None, auto_reset: bool, episode_num: int | None) -> None:
    """``all_at_once``: the name of a manager that steps and resets every env together (None: it has EnvRows)."""
    if episode_num is not None and (isinstance(episode_num, bool) or not isinstance(episode_num, int)
                                    or episode_num < 1):
        raise EnvError(f"episode_num must be a whole number of at least 1 (or None: no limit), got {episode_num!r}")
    if all_at_once and (not auto_reset or episode_num is not None):
        what = "auto_reset=False" if not auto_reset else f"episode_num={episode_num}"
        raise EnvError(f"{what} needs envs stepped and reset one by one, and the {all_at_once} manager steps and "
                       "resets all of them together: use manager='sync' or 'subproc'")


def _row(batch: Any, k: int) -> Any:
    """Row k of a batch of observations (an array, or a dict / tuple of them)."""
    if isinstance(batch, np.ndarray):
        return batch[k]
    if isinstance(batch, dict):
        return {key: _row(value, k) for key, value in batch.items()}
    return tuple(_row(value, k) for value in batch)


def _split(batch: Any, n: int) -> list[Any]:
    """A batch of observations (an array, or a dict / tuple of them) as a list of n per-env observations."""
    if isinstance(batch, np.ndarray):
        return list(batch)
    if isinstance(batch, dict):
        columns = {key: _split(value, n) for key, value in batch.items()}
        return [{key: column[k] for key, column in columns.items()} for k in range(n)]
    if isinstance(batch, tuple):
        columns = [_split(value, n) for value in batch]
        return [tuple(column[k] for column in columns) for k in range(n)]
    raise EnvError(f"observations of type {type(batch).__name__} cannot be split per env")
