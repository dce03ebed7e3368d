"""relayrl eval RUN --video DIR: mp4 episodes through Gymnasium's RecordVideo; refused without moviepy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    import relayrl

    run_dir = tmp_path_factory.mktemp("video") / "run"
    config = {"env": {"num_envs": 2}, "ppo": {"num_steps": 16, "batch_size": 16, "epochs": 1},
              "eval": {"freq": 0, "episodes": 2, "num_envs": 2}}
    relayrl.train("ppo", "CartPole-v1", config, run_dir=run_dir, total_steps=32, tensorboard=False)
    return run_dir


def tree(folder) -> dict:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


def test_eval_video_writes_one_readable_mp4_per_episode(trained_run, tmp_path):
    import imageio

    videos = tmp_path / "videos"
    headless = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "DISPLAY")}
    result = subprocess.run([sys.executable, "-m", "relayrl", "eval", str(trained_run), "--episodes", "2", "--video",
                             str(videos), "--video-episodes", "2"], capture_output=True, text=True, timeout=180,
                            env=headless)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # neither moviepy's progress bar nor SDL's display warnings
    files = [videos / f"CartPole-v1-episode-{k}.mp4" for k in range(2)]
    assert sorted(videos.iterdir()) == files
    for path in files:
        assert f"video written to {path}" in result.stdout
        data = path.read_bytes()
        assert len(data) > 0 and data[4:8] == b"ftyp"  # an ISO media (mp4) file
        with imageio.get_reader(path, format="FFMPEG") as reader:  # decodable, frame by frame
            assert reader.get_meta_data()["codec"] == "h264"
            frames = [frame for frame in reader]  # (not list(reader): its len() is inf)
        assert len(frames) >= 2 and frames[0].shape == (400, 600, 3)  # CartPole's 600x400 picture
        assert any((frame != frames[0]).any() for frame in frames[1:])  # the cart moves


def test_video_without_moviepy_exits_2_naming_the_extra_and_writes_nothing(trained_run, tmp_path, monkeypatch,
                                                                           capsys, run_cli):
    for name in [n for n in sys.modules if n == "moviepy" or n.startswith("moviepy.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "moviepy", None)  # as if it were not installed
    before = tree(trained_run)
    assert run_cli(["eval", str(trained_run), "--video", str(tmp_path / "videos")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--video needs the moviepy package" in err[0]
    assert "python -m pip install -c constraints.txt -e '.[video]'" in err[0] and "'relayrl[" not in err[0]
    assert not (tmp_path / "videos").exists() and tree(trained_run) == before
