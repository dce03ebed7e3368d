"""Your own memory (``<algo>.replay: "module:Class"``): imported, built and checked before a run writes anything.

    memory = build_memory("mymem:HistoryMemory", "dqn.replay", capacity=100_000, observation_space=obs_space,
                          action_space=act_space, seed=0, batch_size=32)

Checked here, each failure one ConfigError naming the class: the reference imports (usercode.py), the object is
a subclass of ``Replay``, its constructor takes the keywords ``MEMORY_PARAMETERS``, and (Box observations) a
probe instance, given
``batch_size`` transitions drawn from the spaces, samples ``batch_size`` of them back with every column added, in
the same dtypes and row shapes (``check_batch``). The real memory's first sample is checked the same way against
the first real transitions (training/offpolicy.py), since collectors may add columns the probe does not have.
"""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym
import numpy as np

from relayrl.data.dtypes import stored_dtype
from relayrl.data.replay.base import MEMORY_PARAMETERS, Replay
from relayrl.errors import ConfigError, RelayRLError
from relayrl.types import Batch
from relayrl.usercode import defined_at, describe, load_object


def memory_class(reference: str, what: str) -> type[Replay]:
    """The class ``reference`` names, checked to be a ``Replay`` whose constructor takes ``MEMORY_PARAMETERS``."""
    cls = load_object(reference, f"{what} {reference!r}")
    if not (isinstance(cls, type) and issubclass(cls, Replay)):
        raise ConfigError(f"{what} {reference!r} is {cls!r}, not a subclass of relayrl.data.replay.Replay: "
                          "define class Memory(Replay) with add, sample and __len__ (docs/library.md, Your own memory)")
    try:
        inspect.signature(cls).bind(**{key: None for key in MEMORY_PARAMETERS})
    except TypeError as exc:
        raise ConfigError(f"{what} {reference!r}: its constructor ({defined_at(cls.__init__)}) cannot be called "
                          f"with the keywords {', '.join(MEMORY_PARAMETERS)} ({exc}): take them (or **kwargs)"
                          ) from None
    return cls


def build_memory(reference: str, what: str, *, prioritized: bool = False, **kwargs: Any) -> Replay:
    """A checked instance of the memory ``reference`` names (module docstring), built with ``kwargs``
    (``MEMORY_PARAMETERS``). ``prioritized``: the memory must override ``update_priorities``."""
    cls = memory_class(reference, what)
    if prioritized and cls.update_priorities is Replay.update_priorities:
        raise ConfigError(f"{what} {reference!r} does not do priorities (no update_priorities of its own), and "
                          "prioritized=true needs them: set prioritized=false or implement update_priorities")
    if not probe_spaces(kwargs["observation_space"], kwargs["action_space"]):  # (checked at the first sample)
        return _construct(cls, reference, what, kwargs)
    probe = _construct(cls, reference, what, {**kwargs, "capacity": max(2, kwargs["batch_size"])})
    added = probe_transitions(kwargs["observation_space"], kwargs["action_space"], kwargs["batch_size"], kwargs["seed"])
    _call(probe.add, reference, what, "add", added)
    sample = _call(probe.sample, reference, what, "sample", kwargs["batch_size"])
    check_batch(added, sample, kwargs["batch_size"], f"{what} {reference!r}: sample({kwargs['batch_size']}) after "
                "adding as many transitions")
    return _construct(cls, reference, what, kwargs)


def probe_spaces(observation_space: gym.Space, action_space: gym.Space) -> bool:
    """Whether ``probe_transitions`` can draw transitions of these spaces (Box observations, array actions)."""
    return isinstance(observation_space, gym.spaces.Box) and isinstance(
        action_space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary))


def _construct(cls: type[Replay], reference: str, what: str, kwargs: dict[str, Any]) -> Replay:
    return _call(cls, reference, what, "the constructor", **kwargs)


def _call(fn: Any, reference: str, what: str, name: str, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except RelayRLError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code may raise anything; one line naming it
        raise ConfigError(f"{what} {reference!r}: {name} raised {describe(exc)}: fix the memory") from None


def probe_transitions(observation_space: gym.Space, action_space: gym.Space, n: int, seed: int) -> Batch:
    """n transitions drawn from the spaces, as replay stores them (the columns every off-policy algorithm reads)."""
    observation_space.seed(seed)
    action_space.seed(seed)
    obs = np.stack([observation_space.sample() for _ in range(n + 1)])
    obs = obs.astype(stored_dtype(obs.dtype))
    action = np.stack([np.asarray(action_space.sample()) for _ in range(n)])
    if action.dtype.kind == "f":
        action = action.astype(np.float32)
    elif action.dtype.kind in "iu":
        action = action.astype(np.int64)
    flags = np.zeros(n, np.float32)
    flags[-1] = 1.0
    return {"obs": obs[:-1], "action": action, "reward": np.zeros(n, np.float32), "next_obs": obs[1:],
            "terminated": flags, "discount": np.full(n, 0.99, np.float32)}


def check_batch(expected: Batch, got: Any, n: int, what: str, exact_keys: bool = False) -> None:
    """A ConfigError starting with ``what`` unless ``got`` is a dict holding every column of ``expected`` with
    ``n`` rows, each in its dtype and row shape (``exact_keys``: and no other column)."""
    if not isinstance(got, dict):
        raise ConfigError(f"{what} returned {type(got).__name__}, not a dict of arrays (a Batch) with the columns "
                          f"{', '.join(expected)}")
    missing = [key for key in expected if key not in got]
    if missing:
        raise ConfigError(f"{what} returned no {', '.join(map(repr, missing))} (it returned "
                          f"{', '.join(got) or 'none'}): return every column that was added")
    extra = [key for key in got if key not in expected]
    if exact_keys and extra:
        raise ConfigError(f"{what} returned the columns {', '.join(map(repr, extra))} it was not given: return the "
                          "batch's columns only")
    for key, want in expected.items():
        value = got[key]
        want_shape = (n, *np.shape(want)[1:])
        shape, dtype = np.shape(value), getattr(value, "dtype", None)
        if not isinstance(value, np.ndarray) or shape != want_shape or dtype != want.dtype:
            raise ConfigError(f"{what} returned {key!r} as {type(value).__name__} {shape} {dtype}, where "
                              f"{want_shape} {want.dtype} was expected: keep every column's shape and dtype")
