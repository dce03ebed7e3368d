"""DrQ's random shift: shapes and dtypes kept, each image a crop of its edge-padded self, obs and next_obs
shifted independently, other columns untouched."""

import numpy as np

from relayrl.data.augment import PAD, random_shift, shift_images


def crops(image, pad, channel_last):
    """Every crop of ``image`` padded by ``pad`` (edge), as random_shift may return it."""
    widths = [(pad, pad), (pad, pad), (0, 0)] if channel_last else [(0, 0), (pad, pad), (pad, pad)]
    padded = np.pad(image, widths, mode="edge")
    h, w = (image.shape[0], image.shape[1]) if channel_last else (image.shape[1], image.shape[2])
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            yield padded[dy:dy + h, dx:dx + w] if channel_last else padded[:, dy:dy + h, dx:dx + w]


def test_random_shift_crops_each_padded_image_and_keeps_the_rest():
    rng = np.random.default_rng(1)
    obs = rng.integers(0, 256, (64, 3, 12, 12), dtype=np.uint8)
    batch = {"obs": obs, "next_obs": obs.copy(), "reward": rng.normal(size=64).astype(np.float32)}
    out = random_shift(batch)
    assert set(out) == set(batch) and out["reward"] is batch["reward"]
    assert out["obs"].shape == obs.shape and out["obs"].dtype == np.uint8
    assert np.array_equal(batch["obs"], obs)  # the input batch is not written into
    for i in range(len(obs)):
        assert any(np.array_equal(out["obs"][i], crop) for crop in crops(obs[i], PAD, channel_last=False))
    assert not np.array_equal(out["obs"], obs)  # shifted (64 images: all unshifted has chance 81^-64)
    assert not np.array_equal(out["obs"], out["next_obs"])  # independent offsets for obs and next_obs


def test_shift_images_channel_last():
    rng = np.random.default_rng(2)
    images = rng.random((16, 10, 10, 4)).astype(np.float32)
    out = shift_images(images, 2, rng)
    assert out.shape == images.shape and out.dtype == np.float32
    for i in range(len(images)):
        assert any(np.array_equal(out[i], crop) for crop in crops(images[i], 2, channel_last=True))
