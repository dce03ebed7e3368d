"""Augmentations of sampled minibatches, for ``<algo>.sample_transform`` (training/sample_transform.py).

    sample_transform: relayrl.data.augment:random_shift

``random_shift`` is DrQ's (Kostrikov et al. 2020): every image of ``obs`` and ``next_obs`` is padded by
``PAD`` pixels on each side, repeating its edge, and cropped back to its size at a random offset, one offset
per image (obs and next_obs independently, as DrQ does). Images are [B, C, H, W] (channel-first) or
[B, H, W, C] (channel-last, C smaller than H and W); other columns pass through. Dtypes and shapes are kept.
"""

from __future__ import annotations

import numpy as np

from relayrl.types import Batch

PAD = 4
_RNG = np.random.default_rng(0)


def random_shift(batch: Batch) -> Batch:
    """``batch`` with its image observations shifted (module docstring); a new dict, the input untouched."""
    out = dict(batch)
    for key in ("obs", "next_obs"):
        if key in batch and np.ndim(batch[key]) == 4:
            out[key] = shift_images(np.asarray(batch[key]), PAD, _RNG)
    return out


def shift_images(images: np.ndarray, pad: int, rng: np.random.Generator) -> np.ndarray:
    """Each image of ``images`` [B, C, H, W] or [B, H, W, C] edge-padded by ``pad`` and cropped at a random offset."""
    channel_last = images.shape[-1] < images.shape[1] and images.shape[-1] < images.shape[2]
    hw = (1, 2) if channel_last else (2, 3)
    widths = [(0, 0)] * 4
    widths[hw[0]] = widths[hw[1]] = (pad, pad)
    padded = np.pad(images, widths, mode="edge")
    height, width = images.shape[hw[0]], images.shape[hw[1]]
    dy, dx = rng.integers(0, 2 * pad + 1, size=(2, len(images)))
    out = np.empty_like(images)
    for i in range(len(images)):
        if channel_last:
            out[i] = padded[i, dy[i]:dy[i] + height, dx[i]:dx[i] + width]
        else:
            out[i] = padded[i, :, dy[i]:dy[i] + height, dx[i]:dx[i] + width]
    return out
