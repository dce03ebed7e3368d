"""Rendered frames made visible, and written as an animated GIF (Pillow, which matplotlib already depends on).

Some envs render frames no viewer shows: MinAtar's ``rgb_array`` frames are 10x10 float colours in
[0, 1] (black once cast to uint8). ``visible_frame`` turns any rendered frame into uint8 RGB a viewer
shows as it looks: [0, 1] floats and bools scaled to 0..255, one channel repeated to three, and frames
smaller than ``MIN_SIDE`` (160) pixels on a side enlarged by a whole factor (each cell a square block, so
grids stay sharp). ``VisibleFrames`` applies it to an env's ``render()``, so ``relayrl eval --render``
(the GIF) and ``--video`` (Gymnasium's RecordVideo) get the same frames.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
from PIL import Image

__all__ = ["MIN_SIDE", "visible_frame", "VisibleFrames", "write_gif"]

MIN_SIDE = 160  # the smallest side of a frame made visible, in pixels


def visible_frame(frame: np.ndarray) -> np.ndarray:
    """``frame`` ([H, W], [H, W, 1], [H, W, 3] or [H, W, 4]; uint8, bool, or floats in [0, 1]) as uint8 RGB
    [H', W', 3], enlarged by a whole factor until its smaller side is at least ``MIN_SIDE`` pixels."""
    frame = np.asarray(frame)
    if frame.dtype == np.bool_:
        frame = frame.astype(np.uint8) * 255
    elif frame.dtype.kind == "f":  # colours in [0, 1] (a float frame already in 0..255 is kept as it is)
        scale = 255.0 if frame.size and float(np.nanmax(frame)) <= 1.0 else 1.0
        frame = np.clip(np.nan_to_num(frame) * scale, 0, 255).round().astype(np.uint8)
    elif frame.dtype != np.uint8:
        frame = np.clip(frame, 0, 255).astype(np.uint8)
    if frame.ndim == 2:
        frame = frame[:, :, None]
    if frame.shape[2] == 1:
        frame = np.repeat(frame, 3, axis=2)
    elif frame.shape[2] == 4:  # RGBA: the colours (GIF and mp4 carry no alpha)
        frame = frame[:, :, :3]
    factor = math.ceil(MIN_SIDE / max(1, min(frame.shape[:2])))
    if factor > 1:
        frame = np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)
    return np.ascontiguousarray(frame)


class VisibleFrames(gym.Wrapper):
    """An env whose ``render()`` returns ``visible_frame`` of the env's frame (``render_mode="rgb_array"``)."""

    def render(self) -> np.ndarray | None:
        with warnings.catch_warnings():  # Gymnasium's env checker on the frames this wrapper fixes
            warnings.filterwarnings("ignore", message=".*RGB-array rendering should return a numpy array.*")
            warnings.filterwarnings("ignore", message=".*No render fps was declared.*")
            frame = self.env.render()
        return None if frame is None else visible_frame(frame)


def write_gif(frames: list[np.ndarray], path: Path, fps: int = 30) -> Path:
    """Write ``frames`` (``visible_frame`` inputs) as a looping GIF at ``fps``. A frame identical to the one
    before it lengthens that one (Pillow's GIF encoder), so the playing time is every frame's."""
    if not frames:
        raise ValueError("no frames to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(visible_frame(frame)) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=max(1, round(1000 / fps)), loop=0)
    return path
