"""make_vec: N copies of an env under a manager, picked by name.

Usage::

    with make_vec("CartPole-v1", num_envs=8, manager="subproc", workers=2, seed=0) as venv:
        obs = venv.reset(seed=0)
        for _ in range(1000):
            result = venv.step(actions)   # send(actions) + recv()
            # result.obs: next observations to act on; result.final_obs[i]: last observation of an
            # episode that ended on this step (terminated[i] or truncated[i]), for bootstrapping.

Managers: ``sync`` (in process; envs/vector.py), ``subproc`` (worker processes, shared memory),
``async`` (subproc whose ``recv`` returns the envs that are ready; ``send`` then takes actions for
those env ids; both envs/subproc.py), ``native`` (the env's own vectorised implementation:
Gymnasium's ``vector_entry_point``, ALE's vector env or EnvPool; envs/native.py). This module sits above all of them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from relayrl.envs.imageobs import wrappers_in_use
from relayrl.envs.native import NativeVectorEnv, native_refusal
from relayrl.envs.registry import make
from relayrl.envs.runner import EnvFactory
from relayrl.envs.subproc import SubprocVectorEnv
from relayrl.envs.vector import SyncVectorEnv, VectorEnv
from relayrl.errors import EnvError

MANAGERS = ("sync", "subproc", "async", "native")


class EnvMaker:
    """A picklable factory: ``gymnasium.make(env_id, **kwargs)`` through relayrl's checks."""

    def __init__(self, env_id: str, kwargs: dict[str, Any] | None = None, max_episode_steps: int | None = None,
                 render_mode: str | None = None, wrapping: dict[str, Any] | None = None):
        self.env_id, self.kwargs = env_id, dict(kwargs or {})
        self.max_episode_steps, self.render_mode = max_episode_steps, render_mode
        self.wrapping = dict(wrapping or {})  # make()'s frame_stack, atari_preprocessing, resize, grayscale

    def __call__(self) -> gym.Env:
        return make(self.env_id, max_episode_steps=self.max_episode_steps, render_mode=self.render_mode,
                    **self.wrapping, **self.kwargs)


def make_vec(env_id_or_factory: str | EnvFactory, num_envs: int, *, manager: str = "sync",
             workers: int | None = None, seed: int | None = None,
             env_kwargs: dict[str, Any] | list[dict[str, Any]] | None = None,
             max_episode_steps: int | None = None, render_mode: str | None = None,
             wrapping: dict[str, Any] | None = None, **options: Any) -> VectorEnv:
    """Build ``num_envs`` copies of an env (Gymnasium id or factory) under ``manager``.

    Args:
        env_kwargs: keyword arguments for every env, or a list with one dict per env (ids only).
        wrapping: ``make``'s preprocessing options (``frame_stack``, ``atari_preprocessing``, ``resize``,
            ``grayscale``; ids only).
        workers: processes for ``subproc`` / ``async`` (default: one per core, at most num_envs).
        seed: when given, envs are reset with seeds ``seed + k``.
        options: manager options: ``max_restarts``; for subproc/async ``step_timeout``,
            ``reset_timeout``; for async ``wait_num``; for native ``threads`` (ALE's stepping threads).
    """
    if manager not in MANAGERS:
        raise EnvError(f"unknown env manager {manager!r}: use one of {', '.join(MANAGERS)}")
    if num_envs < 1:
        raise EnvError(f"num_envs must be at least 1, got {num_envs}")
    if manager == "native":
        return _make_native(env_id_or_factory, num_envs, seed, env_kwargs, max_episode_steps, render_mode,
                            wrapping, workers, options)
    if callable(env_id_or_factory):
        wrappers = wrappers_in_use(wrapping)
        if env_kwargs or wrappers:
            what = ", ".join(["env_kwargs"] * bool(env_kwargs) + wrappers)
            raise EnvError(f"{what}: env_kwargs and the wrapper options apply to env ids; bind arguments and "
                           "wrappers into the factory instead")
        factories = [env_id_or_factory] * num_envs
    else:
        per_env = env_kwargs if isinstance(env_kwargs, list) else [env_kwargs or {}] * num_envs
        if len(per_env) != num_envs:
            raise EnvError(f"env_kwargs has {len(per_env)} entries for {num_envs} envs: give one per env")
        factories = [EnvMaker(env_id_or_factory, kw, max_episode_steps, render_mode, wrapping) for kw in per_env]
    if manager == "sync":
        unknown = set(options) - {"max_restarts"}
        if unknown:
            raise EnvError(f"options {sorted(unknown)} do not apply to the sync manager")
        venv: VectorEnv = SyncVectorEnv(factories, **options)
    else:
        if manager == "subproc" and "wait_num" in options:
            raise EnvError("wait_num applies to the async manager only")
        venv = SubprocVectorEnv(factories, workers=workers, asynchronous=manager == "async", **options)
    if seed is not None:
        venv.reset(seed=seed)
    return venv


def _make_native(env_id: Any, num_envs: int, seed: int | None, env_kwargs: Any, max_episode_steps: int | None,
                 render_mode: str | None, wrapping: dict[str, Any] | None, workers: int | None,
                 options: dict[str, Any]) -> VectorEnv:
    why = native_refusal(env_id, env_kwargs=env_kwargs, wrapping=wrapping, render_mode=render_mode)
    if why is not None:
        raise EnvError(why)
    unknown = set(options) - {"max_restarts", "threads"}
    if unknown or workers is not None:
        raise EnvError(f"options {sorted(unknown | ({'workers'} if workers is not None else set()))} do not apply to "
                       "the native manager (one vector env in this process)")
    venv = NativeVectorEnv(env_id, num_envs, env_kwargs=env_kwargs, max_episode_steps=max_episode_steps,
                           wrapping=wrapping, **options)
    if seed is not None:
        venv.reset(seed=seed)
    return venv
