"""Your own network: an encoder named in the config (``ppo.encoder``, ``dqn.encoder``, ``sac.encoder``).

The contract: ``"package.module:function"`` names a function of an importable module,
``function(observation_space, action_space) -> torch.nn.Module``, whose module maps a batch of
observations (a float32 tensor [n, *obs_shape], as ``data.dtypes.to_tensor`` reads stored
observations: uint8 images arrive as 0..255 floats) to features [n, F]. The algorithm puts its own
heads on the features (PPO's actor and critic heads, DQN's Q head, SAC's actor and twin-critic
heads, each an MLP of the section's ``hidden_sizes``; ``[]``: one linear layer), so the factory
never needs to know the algorithm, and F is found by one forward pass on a dummy batch.

A Dict observation (envs/packed.py: packed into one uint8 row at the env boundary) gives the factory
the Dict space itself, and its module a dict of float32 tensors [n, *shape], one per key (Tuple:
a tuple), unpacked from the packed bytes by ``policy.packed.OnPacked``, which wraps it.

The factory is called once per encoder the algorithm needs (PPO: one for the actor and one for the
critic; DQN: one, its target network is a copy; SAC: one for the actor, one for the twin critics,
their target a copy), so it must return a new module on each call.

The reference, not the module, is what travels: it is part of the config recorded in the run's
``config.yaml`` and in every checkpoint, and every process that builds the policy (the learner,
rollout workers on every backend, remote workers, ``relayrl eval``, bridge evaluation,
``relayrl.load``) imports it by name, as it does ``"module:EnvId"`` envs.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Callable

import gymnasium as gym
import numpy as np
import torch
from pydantic import AfterValidator
from torch import nn

from relayrl.envs import spaces as leaf_spaces
from relayrl.envs.packed import PackedDict
from relayrl.usercode import import_module
from relayrl.errors import ConfigError
from relayrl.policy.packed import OnPacked

__all__ = ["EncoderRef", "check_reference", "load_factory", "build_encoder"]

CONTRACT = ("function(observation_space, action_space) returning a torch.nn.Module that maps observations "
            "[n, *obs_shape] (float32) to features [n, F]")


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def check_reference(value: str | None) -> str | None:
    """The config's format check (no import): ``"module:function"`` or None."""
    if value is None:
        return None
    module, sep, name = value.partition(":")
    if not sep or not module or not name.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
        raise ValueError(f"expected \"package.module:function\" naming a {CONTRACT}, or null for the built-in MLP")
    return value


def load_factory(reference: str, key: str) -> Callable[..., Any]:
    """Import the function ``reference`` names; a ConfigError naming the module or the function if it cannot."""
    module_name, _, name = reference.partition(":")
    module = import_module(module_name, f"{key} {reference!r}")
    factory = getattr(module, name, None)
    if factory is None:
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {module_name}:{close[0]}? " if close else ""
        raise ConfigError(f"{key} {reference!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) has "
                          f"no {name!r}: {hint}name a {CONTRACT}")
    if not callable(factory):
        raise ConfigError(f"{key} {reference!r}: {module_name}.{name} = {factory!r} is not callable: name a "
                          f"{CONTRACT}")
    return factory


def build_encoder(reference: str, observation_space: gym.Space, action_space: gym.Space, key: str
                  ) -> tuple[nn.Module, int]:
    """A new encoder from the factory ``reference`` names, and its feature width F.

    One forward pass on a batch of two observations (zeros, clipped into the space's bounds) checks
    the module before anything trains: it must be a ``torch.nn.Module``, return a floating-point
    tensor [2, F] with F >= 1, and be finite there. Every failure is a ConfigError naming the
    reference and the shape expected.
    """
    factory = load_factory(reference, key)
    packed = observation_space if isinstance(observation_space, PackedDict) else None
    given = packed.space if packed is not None else observation_space  # a Dict observation: the Dict itself
    try:
        module = factory(given, action_space)
    except Exception as exc:  # noqa: BLE001 - user code; one line naming it
        raise ConfigError(f"{key} {reference!r}: calling it with ({given}, {action_space}) raised "
                          f"{_one_line(exc)}: it must be a {CONTRACT}") from None
    if packed is None:
        shape = tuple(observation_space.shape or ())
        batch = f"[2, {_dims(shape)}]"
        dummy = torch.as_tensor(_zeros(observation_space, shape), dtype=torch.float32)
    else:
        batch = "[2, *shape] per key (a dict)"
        dummy = torch.as_tensor(packed.pack(leaf_spaces.build(
            packed.space, [_zeros(f.space, f.shape) for f in packed.fields])), dtype=torch.float32)
    if not isinstance(module, nn.Module):
        raise ConfigError(f"{key} {reference!r} returned a {type(module).__name__}, not a torch.nn.Module: return "
                          f"a module that maps observations {batch} (float32) to features [n, F]")
    if packed is not None:
        module = OnPacked(packed, module)
    try:
        with torch.no_grad():
            features = module(dummy)
    except Exception as exc:  # noqa: BLE001 - user code; one line naming it
        raise ConfigError(f"{key} {reference!r}: its module failed on a batch of observations of shape {batch} "
                          f"(float32): {_one_line(exc)}; it must map them to features [n, F]") from None
    got = tuple(features.shape) if isinstance(features, torch.Tensor) else type(features).__name__
    if not isinstance(features, torch.Tensor) or features.ndim != 2 or features.shape[0] != 2 \
            or features.shape[1] < 1:
        raise ConfigError(f"{key} {reference!r}: its module returned {got} for observations {batch}, "
                          "expected features [2, F] (one row of F >= 1 features per observation): end it with "
                          "nn.Flatten() to flatten feature maps")
    if not features.is_floating_point():
        raise ConfigError(f"{key} {reference!r}: its module returned features of dtype {features.dtype}, "
                          "expected floating point (float32)")
    if not torch.isfinite(features).all():
        raise ConfigError(f"{key} {reference!r}: its module returned non-finite features for observations of "
                          f"zeros {batch}: check its initialisation and normalisation")
    return module, int(features.shape[1])


def _zeros(space: gym.Space, shape: tuple[int, ...]) -> np.ndarray:
    """Two observations of zeros, clipped into the space's bounds."""
    low = np.broadcast_to(getattr(space, "low", getattr(space, "start", -np.inf)), shape)
    high = np.broadcast_to(getattr(space, "high", np.inf), shape)
    return np.clip(np.zeros((2, *shape)), low, high)


def _dims(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape)) if shape else ""


EncoderRef = Annotated[str | None, AfterValidator(check_reference)]
"""The config field's type: ``"package.module:function"`` (checked for form only; imported when a policy is built)."""
