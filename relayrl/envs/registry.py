"""Create Gymnasium environments by id with errors that say what to do."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import gymnasium as gym

from relayrl.errors import EnvError


FACTORY_NAMESPACE = "relayrl-factory"


def _check_id(env_id: str) -> str:
    """The registered id for ``env_id``.

    ``"package.module:EnvId"`` imports the module first (it registers EnvId); ``"package.module:name"``,
    where ``name`` is no registered id but a callable of the module (a function returning a
    ``gymnasium.Env``, or an Env class), registers that factory under ``relayrl-factory/...`` in this
    process, so every process that imports the module can build the env.
    """
    if env_id.startswith("bridge:"):
        raise EnvError(f"{env_id!r} is an external simulator, not a Gymnasium env: it works with relayrl train "
                       "(which launches it); here give a Gymnasium env id")
    if ":" in env_id:
        module, _, env_id = env_id.partition(":")
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            raise EnvError(f"cannot import {module!r} to register {env_id!r}: {exc}") from None
        if env_id not in gym.registry and callable(getattr(loaded, env_id, None)):
            factory_id = f"{FACTORY_NAMESPACE}/{module}.{env_id}-v0"
            if factory_id not in gym.registry:
                gym.register(factory_id, entry_point=getattr(loaded, env_id), disable_env_checker=True)
            return factory_id
    if env_id in gym.registry:
        return env_id
    if env_id.startswith(f"{FACTORY_NAMESPACE}/local."):
        raise EnvError(f"{env_id!r} was an env factory defined in a script or a function, which only the process "
                       "that trained with it knows: move the factory to the top of an importable module and train "
                       "with relayrl.train(algo, module.function), so every process can build it by name")
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else (
        "check the spelling, or import the package that registers it")
    raise EnvError(f"unknown environment {env_id!r}: {hint}")


def make(env_id: str, *, max_episode_steps: int | None = None, render_mode: str | None = None,
         **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with a clear error for an unknown id or bad keyword arguments.

    ``env_id`` may be ``"package.module:EnvId"`` to import the module that registers the env first
    (that is how worker processes find envs registered by user code).
    """
    env_id = _check_id(env_id)
    extra: dict[str, Any] = {}
    if max_episode_steps is not None:
        extra["max_episode_steps"] = max_episode_steps
    if render_mode is not None:
        extra["render_mode"] = render_mode
    try:
        return gym.make(env_id, **extra, **kwargs)
    except TypeError as exc:
        raise EnvError(f"environment {env_id!r} rejected its kwargs {kwargs}: {exc}; "
                       f"fix env.kwargs in the config") from None
    except gym.error.DependencyNotInstalled as exc:
        raise EnvError(f"environment {env_id!r} needs an extra package: {exc}") from None


def spec_stop_value(env_id: str) -> float | None:
    """The env's registered ``reward_threshold``, or None."""
    return gym.spec(_check_id(env_id)).reward_threshold
