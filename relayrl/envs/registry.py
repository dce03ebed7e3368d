"""Create Gymnasium environments by id with errors that say what to do.

Two families get the preprocessing their users expect, in every process that makes them:

- Atari games of ``ale-py`` (``ALE/Pong-v5``; the ``atari`` extra): Gymnasium's ``AtariPreprocessing``
  (frame skip 4 with max-pooling, 84x84 grayscale, up to 30 no-op starts; the env is made with
  ``frameskip=1`` so the skip is not applied twice) and a stack of the last 4 frames: [4, 84, 84] uint8;
  ``atari_preprocessing=False`` keeps the raw RGB frames.
- MinAtar games (``MinAtar/Breakout-v1``; the ``minatar`` extra): registered on first use; their
  observations are MinAtar's own [10, 10, C] boolean planes, which the small CNN reads as they are.

``grayscale`` and ``resize`` shrink image observations with Gymnasium's own wrappers
(``relayrl/envs/imageobs.py``), after the Atari preprocessing and before the stack.

``frame_stack`` k stacks the last k observations of any Box env, oldest first (after a reset the
first observation fills the stack): vectors become [k, n], channel-first images [k*C, H, W] and
channel-last ones [H, W, k*C] (the channel axis is the smaller of the first and last), so a stacked
image is still one image for the CNN encoders.

Dict and Tuple observations are packed into one uint8 row per observation (envs/packed.py:
``PackDict``), so every store keeps one array and the policy's encoder reads each key apart;
``pack_dict=False`` keeps them as dicts (the env managers carry either).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import sys
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator

from relayrl.envs.imageobs import shrink_images
from relayrl.envs.masks import with_masks
from relayrl.envs.packed import PackDict, packable
from relayrl.envs.spaces import image_layout
from relayrl.envs.notices import quiet_ale, quiet_mujoco
from relayrl.errors import EnvError, RelayRLError, install_hint
from relayrl.usercode import describe, import_module


FACTORY_NAMESPACE = "relayrl-factory"
ATARI_STACK = 4
_EXTRAS = {"ALE": ("ale_py", "atari", "an Atari game of the ale-py package (with its ROMs; OpenCV for the preprocessing)"),
           "MinAtar": ("minatar.gym", "minatar", "a MinAtar game of the minatar package")}


def _register_namespace(env_id: str) -> None:
    """Import the package whose ids live in ``env_id``'s namespace (ALE/..., MinAtar/...) and register them."""
    namespace = env_id.split("/", 1)[0] if "/" in env_id else ""
    if namespace not in _EXTRAS:
        return
    module, extra, what = _EXTRAS[namespace]
    try:
        loaded = importlib.import_module(module)
    except ImportError:
        raise EnvError(f"{env_id!r} is {what}, which is not installed: install relayrl's {extra} extra, "
                       f"{install_hint(extra)}") from None
    if namespace == "ALE":
        quiet_ale(loaded)  # (every env would print ALE's banner)
    if env_id in gym.registry:
        return
    if namespace == "ALE":
        gym.register_envs(loaded)
    else:
        loaded.register_envs()


class EnvFactoryCall:
    """The entry point of a ``"package.module:name"`` env whose ``name`` is a function (an Env class is its
    own entry point): calls it with the env's kwargs and checks what it returns, with one message naming the factory for
    arguments it does not take, an exception it raises, or something that is no ``gymnasium.Env``."""

    def __init__(self, reference: str, factory: Any):
        self.reference, self.factory = reference, factory
        functools.update_wrapper(self, factory, updated=())  # its name and signature

    def __call__(self, **kwargs: Any) -> gym.Env:
        try:
            inspect.signature(self.factory).bind(**kwargs)
        except TypeError as exc:
            raise EnvError(f"env {self.reference!r} does not take the arguments {kwargs} ({exc}; it takes "
                           f"{_signature(self.factory)}): fix env.kwargs") from None
        try:
            env = self.factory(**kwargs)
        except RelayRLError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code may raise anything: one line naming it and where
            raise EnvError(f"env {self.reference!r}: {_name(self.factory)}({_args(kwargs)}) raised {describe(exc)}: "
                           "fix the env's factory") from None
        if isinstance(env, gym.Env):
            return env
        raise EnvError(f"env {self.reference!r}: {_name(self.factory)}({_args(kwargs)}) returned "
                       f"{type(env).__module__}.{type(env).__qualname__}, not a gymnasium.Env{_not_env_hint(type(env), self.reference)}")


def _signature(factory: Any) -> str:
    try:
        return str(inspect.signature(factory))
    except (TypeError, ValueError):
        return "?"


def _name(factory: Any) -> str:
    return getattr(factory, "__qualname__", type(factory).__name__)


def _args(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def _not_env_hint(kind: type, reference: str) -> str:
    """The fix for a factory or class that makes something other than a Gymnasium env."""
    if "pettingzoo" in sys.modules:
        from pettingzoo.utils.env import AECEnv, ParallelEnv

        if issubclass(kind, (AECEnv, ParallelEnv)):
            return (f": it is a PettingZoo multi-agent env, which relayrl names with the pettingzoo: prefix: "
                    f"--env pettingzoo:{reference}")
    return ": return a gymnasium.Env (subclass it, or wrap your simulator in one)"


def display_id(env_id: str) -> str:
    """The id a user gave: ``mymod:make_env`` for the ``relayrl-factory/mymod.make_env-v0`` it registered."""
    if env_id.startswith(f"{FACTORY_NAMESPACE}/") and env_id.endswith("-v0"):
        module, _, name = env_id[len(FACTORY_NAMESPACE) + 1:-3].rpartition(".")
        if module != "local":
            return f"{module}:{name}"
    return env_id


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
    if env_id.startswith("pettingzoo:"):
        raise EnvError(f"{env_id!r} is a PettingZoo env, not a Gymnasium env: it works with relayrl train, eval and "
                       "relayrl.load (agents as rows, in the training process); here give a Gymnasium env id")
    if ":" in env_id:
        reference = env_id
        module, _, env_id = env_id.partition(":")
        loaded = import_module(module, f"env {reference!r}", EnvError)
        found = getattr(loaded, env_id, None)
        if env_id not in gym.registry and callable(found):
            factory_id = f"{FACTORY_NAMESPACE}/{module}.{env_id}-v0"
            if factory_id not in gym.registry:
                if isinstance(found, type) and not issubclass(found, gym.Env):
                    raise EnvError(f"env {reference!r}: class {found.__module__}.{found.__qualname__} is not a "
                                   f"gymnasium.Env{_not_env_hint(found, reference)}")
                entry = found if isinstance(found, type) else EnvFactoryCall(reference, found)
                gym.register(factory_id, entry_point=entry, disable_env_checker=True)
            return factory_id
    _register_namespace(env_id)
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
         frame_stack: int | None = None, atari_preprocessing: bool = True, resize: Sequence[int] | None = None,
         grayscale: bool = False, pack_dict: bool = True, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with a clear error for an unknown id or bad keyword arguments, and the
    preprocessing of the module docstring (``frame_stack`` None: 4 for Atari games, else none), and
    ``grayscale`` / ``resize`` (envs/imageobs.py) before the stack.

    ``env_id`` may be ``"package.module:EnvId"`` to import the module that registers the env first
    (that is how worker processes find envs registered by user code).
    """
    env_id = _check_id(env_id)
    atari = env_id.startswith("ALE/") and atari_preprocessing
    if atari:
        kwargs = {"frameskip": 1, **kwargs}  # AtariPreprocessing skips (and max-pools) the frames
        frame_stack = ATARI_STACK if frame_stack is None else frame_stack
    env = _make(env_id, max_episode_steps, render_mode, kwargs)
    if atari:
        env = _atari(env, env_id)
    if resize is not None or grayscale:
        try:
            env = shrink_images(env, resize=resize, grayscale=grayscale)
        except BaseException:
            env.close()
            raise
    if frame_stack and frame_stack > 1:
        env = stack_frames(env, frame_stack)
    env = with_masks(env)  # a Dict's action_mask entry goes to the info first: it is no observation to pack
    if pack_dict and packable(env.observation_space):
        try:
            env = PackDict(env)
        except BaseException:
            env.close()
            raise
    return env


def _make(env_id: str, max_episode_steps: int | None, render_mode: str | None, kwargs: dict[str, Any]) -> gym.Env:
    extra: dict[str, Any] = {}
    if max_episode_steps is not None:
        extra["max_episode_steps"] = max_episode_steps
    if render_mode is not None:
        extra["render_mode"] = render_mode
    spec = gym.spec(env_id)
    mujoco = isinstance(spec.entry_point, str) and spec.entry_point.startswith("gymnasium.envs.mujoco")
    if mujoco:
        quiet_mujoco()  # before its model compiles: MuJoCo's warnings once, not once per env
    try:
        env = gym.make(env_id, **extra, **kwargs)
    except RelayRLError:  # relayrl's own message (a real-time env's config option, a nested make)
        raise
    except gym.error.DependencyNotInstalled as exc:
        fix = f"install relayrl's mujoco extra: {install_hint('mujoco')}" if mujoco else f"{exc}"
        raise EnvError(f"environment {env_id!r} needs a package that is not installed: {fix}") from None
    except TypeError as exc:
        if not _takes(spec, kwargs):
            raise EnvError(f"environment {env_id!r} rejected its kwargs {kwargs}: {exc}; "
                           f"fix env.kwargs in the config") from None
        raise EnvError(f"environment {display_id(env_id)!r} failed to build: {describe(exc)}: fix the env") from None
    except Exception as exc:  # noqa: BLE001 - an env's constructor may raise anything: one line naming it and where
        raise EnvError(f"environment {display_id(env_id)!r} failed to build: {describe(exc)}: fix the env") from None
    if "mujoco" in sys.modules:
        quiet_mujoco()  # a MuJoCo env of the user's own: its next copies' warnings once
    return env


def _takes(spec: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the env's entry point accepts ``kwargs`` (with the registered ones); True when unknown."""
    try:
        creator = spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)
        inspect.signature(creator).bind(**{**spec.kwargs, **kwargs})
    except TypeError:
        return False
    except Exception:  # noqa: BLE001 - no signature to read
        return True
    return True


def _atari(env: gym.Env, env_id: str) -> gym.Env:
    from gymnasium.wrappers import AtariPreprocessing

    try:
        return AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False,
                                  grayscale_obs=True, scale_obs=False)
    except gym.error.DependencyNotInstalled:
        env.close()
        raise EnvError(f"{env_id!r}: Atari preprocessing needs OpenCV, part of relayrl's atari extra: "
                       f"{install_hint('atari')} (or env.atari_preprocessing=false for the raw frames)") from None


def stack_frames(env: gym.Env, k: int) -> gym.Env:
    """The last ``k`` observations as one (module docstring); Box observations only."""
    from gymnasium.wrappers import FrameStackObservation, TransformObservation

    space = env.observation_space
    if not isinstance(space, gym.spaces.Box):
        raise EnvError(f"env.frame_stack stacks Box observations, not {space}: set env.frame_stack=1")
    stacked = FrameStackObservation(env, k)  # [k, *shape]
    shape = space.shape
    if len(shape) != 3:
        return stacked
    low, high = np.asarray(stacked.observation_space.low), np.asarray(stacked.observation_space.high)
    if image_layout(shape).channels_first:  # [k, C, H, W] -> [k*C, H, W]
        new_shape = (k * shape[0], *shape[1:])

        def merge(obs):
            return obs.reshape(new_shape)
    else:  # channels-last [k, H, W, C] -> [H, W, k*C] (frame-major channels)
        new_shape = (*shape[:2], k * shape[2])

        def merge(obs):
            return np.ascontiguousarray(np.moveaxis(obs, 0, 2)).reshape(new_shape)
    merged = gym.spaces.Box(merge(low), merge(high), new_shape, space.dtype)
    return TransformObservation(stacked, merge, merged)


def registered_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registration of ``env_id`` (its package imported first), or the EnvError ``make`` gives."""
    return gym.spec(_check_id(env_id))


def spec_stop_value(env_id: str) -> float | None:
    """The env's registered ``reward_threshold``, or None."""
    return registered_spec(env_id).reward_threshold
