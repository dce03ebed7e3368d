"""The stats side channel end to end: `relayrl train` on the example 3DBall simulators (Python and C, real
processes) logs their "balls_dropped" stat as `sim/balls_dropped` in every row of metrics.jsonl, and in
TensorBoard (which gets every scalar of a row, relayrl/io/metrics.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from relayrl.testing.tensorboard import tensorboard_scalars


@pytest.mark.parametrize("simulator", ["python", "c"])
def test_a_short_run_logs_the_simulators_stat_in_every_row(tmp_path, simulator):
    from relayrl.bridge.cbuild import build, have_compiler

    if simulator == "python":
        env = f"bridge:{shlex.quote(sys.executable)} -m relayrl.bridge.examples.ball3d"
    elif have_compiler():
        env = f"bridge:{shlex.quote(str(build('ball3d', tmp_path / 'build')))}"
    else:
        pytest.skip("no C compiler ($CC or cc)")
    run = subprocess.run([sys.executable, "-m", "relayrl", "train", "ppo", "--env", env, "--total-steps", "1536",
                          "--set", "ppo.num_steps=64", "--set", "eval.freq=0", "--set", "eval.episodes=2",
                          "--set", "env.kwargs={args: [--agents, '8']}", "--run-dir", str(tmp_path / "run"),
                          "--quiet"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["event"] == "train"]
    assert len(train) == 3 and all("sim/balls_dropped" in r for r in train), train
    # 192 turns, far fewer than the 500 that cut an episode: every episode that ended was a ball that fell,
    # and the sum of each row's drops is every ended episode the trainer counted
    dropped = [r["sim/balls_dropped"] for r in train]
    assert all(d == int(d) >= 0 for d in dropped) and sum(dropped) > 0, dropped
    assert sum(dropped) == sum(r.get("train/episodes", 0) for r in train), train
    assert tensorboard_scalars(tmp_path / "run")["sim/balls_dropped"] == [(r["env_steps"], d) for r, d in
                                                                          zip(train, dropped)]
