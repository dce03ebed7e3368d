"""DQN trains on an image env (MinAtar Breakout, [10, 10, 4] planes) through the replay's "frames" layout
(``dqn.replay_layout=frames``; auto keeps such small planes plain), which holds each observation once: a run's
replay file says so, and its items hold the env's observations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relayrl import launch
from relayrl.config import build_config
from relayrl.data.replay import ReplayBuffer
from relayrl.io.metrics import read_metrics

pytest.importorskip("minatar")


def test_dqn_trains_on_minatar_through_the_frames_layout(tmp_path):
    sets = ["env.num_envs=2", "eval.freq=1000", "eval.episodes=2", "eval.num_envs=2", "threads=1",
            "dqn.start_training=200", "dqn.batch_size=32", "dqn.steps_per_iteration=8", "dqn.buffer_size=1000",
            "dqn.hidden_sizes=[32]", "dqn.updates_per_step=0.25", "dqn.replay_layout=frames"]
    config = build_config("dqn", None, sets, {"total_steps": 1200, "seed": 0, "env.id": "MinAtar/Breakout-v1"})
    summary = launch.run(config, run_dir=tmp_path / "run", quiet=True, tensorboard=False)
    assert summary["stop_reason"] == "total_steps" and summary["updates"] > 200
    losses = [e["train/loss/td"] for e in read_metrics(tmp_path / "run") if "train/loss/td" in e]
    assert losses and all(math.isfinite(x) for x in losses)

    buffer = ReplayBuffer(1000, layout="frames")
    buffer.load(tmp_path / "run" / "checkpoints" / "replay.safetensors")
    assert len(buffer) == 1000 and buffer.evicted == 0  # the ring wrapped
    storage = buffer.storage
    in_use = int((storage.ring.user >= storage.written - storage.capacity).sum())
    assert in_use < 1.25 * len(buffer)  # one observation per transition (+ resets), not two
    batch = buffer.sample(64)
    assert batch["obs"].shape == (64, 10, 10, 4) and batch["obs"].dtype == np.uint8  # bool planes as uint8 0/1
    assert set(np.unique(batch["obs"])) <= {0, 1}
