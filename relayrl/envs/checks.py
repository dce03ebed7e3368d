"""What an env returns, checked where it enters relayrl (``EnvRunner``: the sync manager and every env
worker process run it), so a mistake in a user's env is one ``EnvError`` (exit code 2) naming the env,
what it returned, what was expected and where its code is, not a numpy error deep in a manager.

Checked, at a negligible cost per step:

- ``reset`` returns ``(obs, info)``; ``step`` returns Gymnasium's five values (the old Gym API's four
  are named as such);
- observations have the shapes of the observation space: every reset's, each env's first step after it
  was built, and any observation that does not fit the preallocated arrays;
- rewards are finite numbers: one ``math.isfinite`` over their sum per vector step, and a look at each
  reward only when that fails.
"""

from __future__ import annotations

import math
import traceback
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from relayrl.envs import spaces
from relayrl.envs.registry import display_id
from relayrl.errors import EnvError
from relayrl.usercode import defined_at

_GYMNASIUM = str(Path(gym.__file__).resolve().parent)


def env_label(env: gym.Env, index: int) -> str:
    """``env 3 (mymod:make_env)``: the env's index and the id it was made from (else its class)."""
    spec = env.spec
    name = display_id(spec.id) if spec is not None else type(env.unwrapped).__qualname__
    return f"env {index} ({name})"


def code_of(env: gym.Env, method: str) -> str:
    """``Good.step at /home/me/mymod.py:14``: where the env's own ``method`` is defined."""
    kind = type(env.unwrapped)
    return f"{kind.__qualname__}.{method} at {defined_at(getattr(kind, method))}"


def reset_result(env: gym.Env, index: int, result: Any) -> tuple[Any, dict]:
    """``(obs, info)`` of a ``reset``, or an EnvError for anything else (the old API's bare observation)."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
        return result
    got = f"a tuple of {len(result)} values" if isinstance(result, tuple) else f"a {type(result).__name__}"
    raise EnvError(f"{env_label(env, index)}: reset returned {got}, but Gymnasium's reset returns (obs, info) "
                  f"(the old Gym API returned the observation alone): return obs, {{}} ({code_of(env, 'reset')})")


def step_error(env: gym.Env, index: int, result: Any) -> EnvError:
    """The error for a ``step`` result that is not Gymnasium's five values."""
    if isinstance(result, tuple) and len(result) == 4:
        got = "4 values (obs, reward, done, info: the old Gym API)"
    elif isinstance(result, tuple):
        got = f"{len(result)} values"
    else:
        got = f"a {type(result).__name__}"
    return EnvError(f"{env_label(env, index)}: step returned {got}, but Gymnasium's step returns 5: obs, reward, "
                    f"terminated, truncated, info (terminated: the episode ended in a terminal state; truncated: "
                    f"it was cut short, e.g. by a time limit): fix {code_of(env, 'step')}")


def wrapper_unpack_error(env: gym.Env, index: int, call: str, exc: BaseException) -> EnvError | None:
    """The error for a ``reset`` or ``step`` result that one of Gymnasium's wrappers (TimeLimit, the env checker)
    could not unpack: the old Gym API seen through them; None for any other exception (an env fault)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not isinstance(exc, ValueError) or "unpack" not in str(exc) or not frames \
            or not str(Path(frames[-1].filename).resolve()).startswith(_GYMNASIUM):
        return None
    expected = "(obs, info)" if call == "reset" else ("5 values: obs, reward, terminated, truncated, info (the old "
                                                      "Gym API returned 4: obs, reward, done, info)")
    return EnvError(f"{env_label(env, index)}: a Gymnasium wrapper could not unpack what {call} returned ({exc}): "
                    f"Gymnasium's {call} returns {expected}: fix {code_of(env, call)}")


def obs_mismatch(space: gym.Space, targets: Sequence[np.ndarray], obs: Any) -> str | None:
    """What is wrong with one observation for arrays ``targets`` (``[n, *shape]`` per leaf of ``space``),
    or None when it fits."""
    try:
        values = [obs] if len(targets) == 1 and not isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)) \
            else spaces.flatten(space, obs)
    except (KeyError, IndexError, TypeError):
        return f"an observation of type {type(obs).__name__} that does not fit {space}"
    for leaf, value, target in zip(spaces.leaves(space), values, targets):
        if np.shape(value) != target.shape[1:]:
            entry = f" (entry {'/'.join(map(str, leaf.path))})" if leaf.path else ""
            return f"an observation of shape {np.shape(value)}{entry} where {target.shape[1:]} was expected"
    return None


def obs_error(env: gym.Env, index: int, call: str, what: str, space: gym.Space) -> EnvError:
    return EnvError(f"{env_label(env, index)}: {call} returned {what}: its observation_space is {space}; return "
                    f"observations of that shape or fix observation_space ({code_of(env, call)})")


def rewards_finite(rewards: list[Any]) -> bool:
    """Cheap: whether the sum of ``rewards`` is a finite number (NaN and infinity survive a sum)."""
    try:
        return math.isfinite(sum(rewards))
    except (TypeError, ValueError):
        return False


def reward_error(envs: Sequence[gym.Env], offset: int, rewards: list[Any], steps: Sequence[int],
                 actions: np.ndarray) -> EnvError | None:
    """The error for the first reward of ``rewards`` that is no finite number (None when all are: a sum that
    overflowed); ``steps[k]``: the step of env k's episode."""
    for k, reward in enumerate(rewards):
        try:
            bad = np.ndim(reward) != 0 or not math.isfinite(reward)
        except (TypeError, ValueError):
            bad = True
        if bad:
            return EnvError(f"{env_label(envs[k], offset + k)} returned reward {reward!r} at step {steps[k]} of its "
                            f"episode (action {actions[k].tolist()}): a reward must be a finite number; fix "
                            f"{code_of(envs[k], 'step')}")
    return None
