"""An env's own mirror indices: roadrunner's ``get_observation_mirror_indices()`` and
``get_action_mirror_indices()`` on the unwrapped env (signed indices, policy/mirror.py's convention).

The one place that looks for those optional methods. An Experience that has a local env of the run
reads them through ``env_mirror_of`` (``Experience.mirror_indices``: it builds one env for it and
closes it), and the Trainer hands that method to ``Algorithm.bind_env``, which calls it only when it
needs them (PPO's ``mirror_spec: auto`` for an env without a built-in spec).
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.errors import EnvError
from relayrl.policy.mirror import ACT_METHOD, OBS_METHOD, EnvMirrorIndices


def read_mirror_indices(env: gym.Env, env_id: str) -> EnvMirrorIndices | None:
    """The env's mirror indices (None when it defines neither method); one without the other, or a
    method that fails or returns no list, is an EnvError naming it."""
    base = env.unwrapped
    methods = {name: getattr(base, name, None) for name in (OBS_METHOD, ACT_METHOD)}
    defined = [name for name, method in methods.items() if callable(method)]
    if not defined:
        return None
    if len(defined) == 1:
        missing = OBS_METHOD if defined == [ACT_METHOD] else ACT_METHOD
        raise EnvError(f"{env_id} defines {defined[0]}() but not {missing}(): a mirror needs both (or give "
                       "ppo.mirror_spec=FILE.yaml)")
    lists = []
    for name in (OBS_METHOD, ACT_METHOD):
        try:
            value = methods[name]()
        except Exception as exc:
            raise EnvError(f"{env_id}'s {name}() failed: {type(exc).__name__}: {exc}") from None
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            raise EnvError(f"{env_id}'s {name}() returned {type(value).__name__}, not a list of signed indices")
        lists.append(list(value))
    return EnvMirrorIndices(env_id, *lists)


def env_mirror_of(make_env: Callable[[], gym.Env], env_id: str) -> EnvMirrorIndices | None:
    """Build one env with ``make_env``, read its indices, close it."""
    env: Any = make_env()
    try:
        return read_mirror_indices(env, env_id)
    finally:
        env.close()
