"""PPO on ALE/Pong-v5 with env.manager=native (ALE's own vector env) runs end to end from the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("ale_py.vector_env")


def test_ppo_trains_on_pong_with_the_native_manager(tmp_path):
    run_dir = tmp_path / "run"
    sets = ["env.manager=native", "env.num_envs=4", "env.max_episode_steps=200", "ppo.num_steps=64",
            "ppo.batch_size=128", "ppo.epochs=1", "eval.freq=0", "eval.episodes=1", "eval.num_envs=1"]
    run = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", "ALE/Pong-v5", "--total-steps",
                          "512", "--seed", "0", "--run-dir", str(run_dir), "--quiet", "--no-tensorboard",
                          *[arg for s in sets for arg in ("--set", s)]],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    assert train[-1]["env_steps"] == 512
    # 200 frames: Pong episodes of 50 steps, so finished episodes (autoresets) were in the data
    assert any("train/return_mean" in e for e in train)
