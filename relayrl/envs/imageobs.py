"""Smaller image observations by config: ``env.grayscale`` and ``env.resize`` (``relayrl.envs.make``).

Big frames make big networks: the Nature CNN on PettingZoo's ``cooperative_pong`` (280x480 RGB) has a
57M-weight linear layer after its convolutions (policy/encoders.py warns), trains at a crawl and writes
checkpoints of hundreds of MB. Shrinking the frames first is the usual fix:

- ``resize: [h, w]``: Gymnasium's ``ResizeObservation`` (OpenCV, area interpolation): ``[H, W]`` or
  ``[H, W, C]`` uint8 -> ``[h, w]`` or ``[h, w, C]``.
- ``grayscale: true``: Gymnasium's ``GrayscaleObservation`` (keeping a channel axis): ``[H, W, 3]``
  uint8 RGB -> ``[H, W, 1]``.

The resize comes first (OpenCV shrinks three channels faster than Gymnasium's float formula turns a big
frame gray: both take 1 ms on a 280x480 frame, grayscale alone 2.3 ms), then grayscale, then
``env.frame_stack``, so a stack of ``k`` grayscale frames is ``[h, w, k]``. Both take channels-last uint8
images (what Gymnasium renders and PettingZoo's butterfly envs observe); anything else is refused naming
the option to drop.

Every process that makes the env applies them (they travel in ``EnvConfig.wrapping()``), and the
options are saved in ``config.yaml`` and the checkpoints, so ``relayrl eval`` and ``relayrl.load``
rebuild the same observations. PettingZoo ParallelEnvs get the same per agent (``agentimages.wrap_agents``:
``relayrl/envs/agentimages.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from relayrl.envs.spaces import image_layout
from relayrl.errors import EnvError

__all__ = ["shrink_images", "image_transform", "wrappers_in_use"]


def wrappers_in_use(wrapping: dict[str, Any] | None,
                    names: Sequence[str] = ("frame_stack", "atari_preprocessing", "resize", "grayscale")) -> list[str]:
    """The options of ``wrapping`` (``EnvConfig.wrapping()``) among ``names`` that wrap an env made by id,
    as ``env.NAME=VALUE``: what an env factory or the native manager cannot honour."""
    wrapping = wrapping or {}
    used = {"frame_stack": wrapping.get("frame_stack") not in (None, 1),
            "atari_preprocessing": wrapping.get("atari_preprocessing", True) is not True,
            "resize": wrapping.get("resize") is not None, "grayscale": bool(wrapping.get("grayscale"))}
    return [f"env.{name}={_show(wrapping[name])}" for name in names if used[name]]


def _show(value: Any) -> str:
    return f"[{','.join(str(v) for v in value)}]" if isinstance(value, (list, tuple)) else str(value).lower()


def _check(space: gym.Space, option: str, rgb: bool) -> None:
    """Refuse a space Gymnasium's wrapper for ``option`` cannot take, naming the option to drop."""
    shape = tuple(space.shape) if isinstance(space, gym.spaces.Box) else ()
    takes = "channels-last RGB images [H, W, 3] of uint8" if rgb else "uint8 images [H, W] or [H, W, C] (channels last)"
    if rgb:
        layout_fits = len(shape) == 3 and shape[2] == 3
    else:
        layout_fits = len(shape) == 2 or (len(shape) == 3 and not image_layout(shape).channels_first)
    fits = isinstance(space, gym.spaces.Box) and np.dtype(space.dtype) == np.uint8 and layout_fits
    if fits and not (np.all(space.low == 0) and np.all(space.high == 255)):
        fits = False
        takes += " bounded 0..255"
    if not fits:
        raise EnvError(f"{option} takes {takes}, but the observations are {space}: drop {option}")


def image_transform(space: gym.Space, resize: Sequence[int] | None = None, grayscale: bool = False
                    ) -> tuple[Callable[[np.ndarray], np.ndarray], gym.spaces.Box]:
    """The observation function and the new space of ``shrink_images`` for observations of ``space``
    (what ``wrap_agents`` applies to each agent): Gymnasium's wrappers, on a stand-in env of ``space``."""
    wrapped = shrink_images(_SpaceOnly(space), resize=resize, grayscale=grayscale)
    steps, env = [], wrapped
    while isinstance(env, gym.ObservationWrapper):  # outermost first
        steps.append(env.observation)
        env = env.env
    steps.reverse()

    def transform(obs: np.ndarray) -> np.ndarray:
        for step in steps:
            obs = step(obs)
        return obs

    return transform, wrapped.observation_space


def shrink_images(env: gym.Env, *, resize: Sequence[int] | None = None, grayscale: bool = False) -> gym.Env:
    """``env`` with Gymnasium's ``ResizeObservation`` and then ``GrayscaleObservation`` (channel kept) as asked
    (the module docstring); an EnvError naming the option when the observations are no image it takes."""
    from gymnasium.wrappers import GrayscaleObservation, ResizeObservation

    if resize is not None:
        option = f"env.resize={_show(resize)}"
        if len(resize) != 2 or any(int(side) < 1 for side in resize):
            raise EnvError(f"{option}: give the new [height, width], two positive numbers of pixels")
        _check(env.observation_space, option, rgb=False)
        try:
            env = ResizeObservation(env, (int(resize[0]), int(resize[1])))
        except gym.error.DependencyNotInstalled:
            raise EnvError(f"{option} resizes with OpenCV, which is not installed: python -m pip install "
                           "opencv-python-headless (part of relayrl's atari extra)") from None
    if grayscale:
        _check(env.observation_space, "env.grayscale=true", rgb=True)
        env = GrayscaleObservation(env, keep_dim=True)
    return env


class _SpaceOnly(gym.Env):
    """A stand-in env with an observation space only: Gymnasium's observation wrappers are built on an env."""

    def __init__(self, space: gym.Space):
        self.observation_space, self.action_space = space, gym.spaces.Discrete(1)
