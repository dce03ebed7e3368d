"""A scripted or human policy acting in place of the learned one (``relayrl worker --policy module:function``,
TMRL's expert worker): a function of the observations that returns the env's actions.

    def drive(obs):            # obs: [n, *obs_shape], one row per env of the worker
        return actions         # [n, *action_shape] in the env's action space (a Discrete action: [n] integers)

``ScriptedPolicy`` wraps the learner's policy (which keeps the spaces, the weights and the stored form of an
action): what the function returns goes to the env, and replay stores it as the learner's policy stores its own
actions (a Box action scaled to [-1, 1], a Discrete one as its index), so the trainer learns from the expert's
transitions like any worker's. Its first answer and every later one are checked: a wrong shape, an action outside
the space, a non-finite value or an exception is one ConfigError naming the function and the fix.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from relayrl.core import Policy
from relayrl.errors import ConfigError, RelayRLError
from relayrl.types import Mode, PolicyOutput
from relayrl.usercode import describe, load_object

__all__ = ["SCRIPT_CONTRACT", "ScriptedPolicy", "load_script"]

SCRIPT_CONTRACT = ("function(obs) -> actions: obs [n, *observation_shape] (one row per env), actions [n, "
                   "*action_shape] in the env's action space")


def load_script(reference: str, key: str = "--policy") -> Callable[[np.ndarray], Any]:
    """The function ``"module:function"`` names (imported as env ids are); a ConfigError if it cannot be."""
    function = load_object(reference, f"{key} {reference!r}")
    if not callable(function):
        raise ConfigError(f"{key} {reference!r} is {function!r}, not callable: name a {SCRIPT_CONTRACT}")
    return function


class ScriptedPolicy(Policy):
    """Acts with ``function``; stores and learns as ``inner`` (the algorithm's policy) does."""

    def __init__(self, inner: Policy, function: Callable[[np.ndarray], Any], reference: str):
        space = inner.action_space
        if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ConfigError(f"--policy {reference!r}: a scripted policy acts in Box or Discrete action spaces, not "
                              f"{space}")
        self.inner, self.function, self.reference = inner, function, reference
        self.observation_space, self.action_space = inner.observation_space, space
        self.action_shape, self.action_dtype, self.obs_dtype = inner.action_shape, inner.action_dtype, inner.obs_dtype
        self.calls = 0
        self.observation_space.seed(0)  # a first answer before anything connects: two observations of the space
        self.act(np.stack([self.observation_space.sample() for _ in range(2)]))

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.inner.version

    def act(self, obs: np.ndarray, mode: Mode = "collect", action_mask: np.ndarray | None = None) -> PolicyOutput:
        try:
            answer = self.function(obs)
        except RelayRLError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code; one line naming it
            raise ConfigError(f"--policy {self.reference!r} raised {describe(exc)} on observations of shape "
                              f"{list(np.shape(obs))}: fix the function (a {SCRIPT_CONTRACT})") from None
        env_action = self._checked(answer, len(obs))
        self.calls += 1
        return PolicyOutput(action=self._stored(env_action), env_action=env_action, obs=obs)

    def _checked(self, answer: Any, n: int) -> np.ndarray:
        space = self.action_space
        action = np.asarray(answer)
        want = (n, *space.shape)
        fix = f"return {list(want)} actions in {space} (one row per env: obs has {n} rows)"
        if action.shape != want:
            raise ConfigError(f"--policy {self.reference!r} returned actions of shape {list(action.shape)}: {fix}")
        if isinstance(space, gym.spaces.Discrete):
            if action.dtype.kind not in "iu" or (action < space.start).any() or (action >= space.start + space.n).any():
                raise ConfigError(f"--policy {self.reference!r} returned {action.dtype} actions {action.tolist()[:8]}"
                                  f", not integers of {space}: {fix}")
            return action.astype(np.int64)
        if action.dtype.kind not in "fiu" or not np.all(np.isfinite(action)):
            raise ConfigError(f"--policy {self.reference!r} returned non-finite or non-numeric actions "
                              f"({action.dtype}): {fix}")
        if (action < space.low).any() or (action > space.high).any():
            raise ConfigError(f"--policy {self.reference!r} returned actions outside the bounds of {space} "
                              f"(from {action.min():g} to {action.max():g}): {fix}, clipped to the bounds")
        return action.astype(space.dtype)

    def _stored(self, env_action: np.ndarray) -> np.ndarray:
        """The action as the learner's own policy would store it (``PolicyOutput.action``)."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return (env_action - int(space.start)).astype(self.action_dtype)
        if np.dtype(self.action_dtype).kind == "f" and np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)):
            low, high = space.low.astype(np.float32), space.high.astype(np.float32)
            return np.clip(2.0 * (env_action - low) / (high - low) - 1.0, -1.0, 1.0).astype(np.float32)
        return env_action.astype(self.action_dtype)

    def get_weights(self) -> dict[str, Any]:
        return self.inner.get_weights()

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        self.inner.set_weights(weights, version)
