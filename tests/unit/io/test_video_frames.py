"""Rendered frames are made visible (relayrl/io/video.py): MinAtar's 10x10 [0, 1] float colours become
coloured uint8 pictures of at least 160 px a side, in the GIF of ``relayrl eval --render`` and the mp4 of
``--video``, with a frame for the reset and for every step of the episode."""

from __future__ import annotations

import numpy as np
import pytest

from relayrl.io.video import MIN_SIDE, visible_frame

ENV = "MinAtar/Breakout-v1"


@pytest.fixture(scope="module")
def minatar_run(tmp_path_factory):
    import relayrl

    run_dir = tmp_path_factory.mktemp("minatar") / "run"
    config = {"env": {"num_envs": 2}, "ppo": {"num_steps": 16, "batch_size": 16, "epochs": 1},
              "eval": {"freq": 0, "episodes": 1, "num_envs": 1}}
    relayrl.train("ppo", ENV, config, run_dir=run_dir, total_steps=32, tensorboard=False)
    return run_dir


def episode_steps(run_dir, seed: int = 0) -> int:
    """Steps of the deterministic episode from ``seed`` (the one --render and --video record first)."""
    import relayrl
    from relayrl.envs import make

    policy, env = relayrl.load(run_dir), make(ENV)
    obs, _ = env.reset(seed=seed)
    steps, done = 0, False
    while not done:
        obs, _, terminated, truncated, _ = env.step(policy.predict(obs))
        steps, done = steps + 1, terminated or truncated
    env.close()
    return steps


def assert_visible(frame: np.ndarray) -> None:
    """At least MIN_SIDE pixels a side, RGB, not black, in colour (not only grays)."""
    assert frame.ndim == 3 and frame.shape[2] == 3 and min(frame.shape[:2]) >= MIN_SIDE, frame.shape
    pixels = frame.reshape(-1, 3).astype(int)
    assert pixels.max() > 100  # not black (MinAtar's frames cast to uint8 are all 0 or 1)
    assert (pixels.max(axis=1) - pixels.min(axis=1)).max() > 40  # some pixel has a colour


def test_eval_render_gif_has_every_frame_coloured_and_enlarged(minatar_run, tmp_path):
    from PIL import Image, ImageSequence

    from relayrl.training.saved_policy import evaluate_checkpoint

    gif = tmp_path / "episode.gif"
    evaluate_checkpoint(minatar_run, episodes=1, render=str(gif))
    steps = episode_steps(minatar_run)
    with Image.open(gif) as image:
        frames = [(np.asarray(f.convert("RGB")), f.info["duration"]) for f in ImageSequence.Iterator(image)]
    assert len(frames) == steps + 1  # the reset's frame and one per step (Breakout's ball moves every step)
    assert sum(duration for _, duration in frames) == (steps + 1) * frames[0][1]
    for frame, _ in frames:
        assert_visible(frame)


def test_eval_video_has_every_frame_coloured_and_enlarged(minatar_run, tmp_path):
    import imageio

    from relayrl.training.saved_policy import evaluate_checkpoint

    result = evaluate_checkpoint(minatar_run, episodes=1, video=tmp_path / "videos")
    steps = episode_steps(minatar_run)
    with imageio.get_reader(result["videos"][0], format="FFMPEG") as reader:
        frames = [frame for frame in reader]
    assert len(frames) == steps + 1
    for frame in frames:
        assert_visible(frame)


@pytest.mark.parametrize("frame, shape, value", [
    (np.ones((10, 10, 3)), (160, 160, 3), 255),                    # [0, 1] floats (MinAtar)
    (np.ones((10, 20), bool), (160, 320, 3), 255),                 # a bool plane, one channel
    (np.full((40, 50, 4), 7, np.uint8), (160, 200, 3), 7),          # RGBA uint8: the colours, enlarged x4
    (np.full((400, 600, 3), 9, np.uint8), (400, 600, 3), 9),        # big enough: as it is
])
def test_visible_frame_scales_colours_and_enlarges_small_frames_by_a_whole_factor(frame, shape, value):
    out = visible_frame(frame)
    assert out.shape == shape and out.dtype == np.uint8 and (out == value).all()


def test_visible_frame_keeps_each_cell_a_square_block():
    grid = np.zeros((10, 10, 3))
    grid[2, 3] = (1.0, 0.5, 0.0)
    out = visible_frame(grid)
    block = np.argwhere(out.any(axis=2))
    assert block.min(axis=0).tolist() == [32, 48] and block.max(axis=0).tolist() == [47, 63]
    assert out[40, 50].tolist() == [255, 128, 0]
