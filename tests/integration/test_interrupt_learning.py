"""Ctrl-C during a long learning iteration stops the run within seconds (the algorithm checks the stop
event between gradient steps: ``Algorithm.stop_on``), not after the iteration, and still saves."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

TINY = ["--set", "env.num_envs=2", "--set", "env.manager=sync", "--set", "eval.freq=0", "--set", "eval.episodes=1",
        "--set", "eval.num_envs=1", "--quiet", "--no-tensorboard"]
# One iteration of each takes minutes: 100k PPO epochs of 4 minibatches; 10k DQN updates per env step, 32
# env steps a round.
LONG_ITERATION = {
    "ppo": ["--set", "ppo.num_steps=16", "--set", "ppo.batch_size=8", "--set", "ppo.epochs=100000"],
    "dqn": ["--set", "dqn.start_training=32", "--set", "dqn.steps_per_iteration=16", "--set",
            "dqn.updates_per_step=10000", "--set", "dqn.batch_size=8"],
}
FULL_ITERATION = {"ppo": 400_000, "dqn": 320_000}  # updates the iteration would make


def _logged_updates(run_dir) -> int:
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    return max([json.loads(line).get("updates", 0) for line in lines], default=0)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_ctrl_c_mid_iteration_stops_within_seconds_and_saves(tmp_path, algo):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "relayrl", "train", algo, "--env", "CartPole-v1",
                             "--total-steps", "100000", "--run-dir", str(run_dir), *LONG_ITERATION[algo], *TINY],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (run_dir / "config.yaml").exists() and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(2.0)  # the first rounds take milliseconds: by now the learner is inside its long iteration
        assert _logged_updates(run_dir) == 0  # no iteration that learned has ended
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # (the whole iteration: minutes)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-2000:]
    assert took < 30, f"stopped {took:.1f} s after Ctrl-C"
    assert "Traceback" not in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    assert 0 < summary["updates"] < FULL_ITERATION[algo]  # stopped inside the iteration, after some updates
    last = json.loads((run_dir / "checkpoints" / "last.json").read_text())
    assert last["run"]["updates"] == summary["updates"]
